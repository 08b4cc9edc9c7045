// DiLoCo's checkpoint (kindling/nn/diloco.h): what every worker agrees on once, what each one
// has of its own gathered from all of them, and the exchanges in flight kept as pending.
#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <string>

#include "diloco_impl.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"

namespace kindling {
namespace nn {

namespace {

constexpr const char* kWho = "kindling::nn::DiLoCo::load_state_dict: ";
using List = c10::impl::GenericList;

List tensor_list(const std::vector<at::Tensor>& tensors) {
  List out(c10::AnyType::get());
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

// The settings the pieces' schedule depends on, as saved and as compared on load.
StateDict schedule_of(const DiLoCoOptions& o) {
  StateDict d = new_state_dict();
  d.insert("sync_every", o.sync_every());
  d.insert("warmup_steps", o.warmup_steps());
  d.insert("fragments", o.fragments());
  d.insert("fragment_sync_delay", o.fragment_sync_delay());
  return d;
}

// Every rank's own part, in rank order.
List gather(const StateDict& mine, int world) {
  List out(c10::AnyType::get());
  if (world == 1) {
    out.push_back(mine);
    return out;
  }
  const std::vector<char> bytes = torch::pickle_save(mine);
  for (const std::string& b : dist::all_gather(std::string(bytes.begin(), bytes.end())))
    out.push_back(torch::pickle_load(std::vector<char>(b.begin(), b.end())).toGenericDict());
  return out;
}

// `saved` (a list of tensors) checked against `like`'s shapes, as `what`.
void check_shapes(const c10::IValue& saved, const std::vector<at::Tensor>& like, const char* what) {
  KINDLING_CHECK(saved.isList(), kWho, "'", what, "' is not a list");
  const auto list = saved.toList();
  KINDLING_CHECK(list.size() == like.size(), kWho, "'", what, "' holds ", list.size(), " tensors, this model has ",
                 like.size(), "; load a state saved from the same model");
  for (std::size_t i = 0; i < like.size(); ++i) {
    const at::Tensor t = list.get(i).toTensor();
    KINDLING_CHECK(t.sizes() == like[i].sizes(), kWho, "'", what, "' tensor ", i, " has shape ", t.sizes(),
                   ", the model's is ", like[i].sizes(), "; load a state saved from the same model");
  }
}

void copy_into(const c10::IValue& saved, const std::vector<at::Tensor>& into) {
  at::NoGradGuard no_grad;
  const auto list = saved.toList();
  for (std::size_t i = 0; i < into.size(); ++i) into[i].copy_(list.get(i).toTensor());
}

}  // namespace

StateDict DiLoCo::state_dict() const {
  Impl& s = *impl_;
  std::vector<at::Tensor> own, global;
  List outer(c10::AnyType::get()), pending(c10::AnyType::get()), residual(c10::AnyType::get());
  for (std::size_t p = 0; p < s.fragments.size(); ++p) {
    diloco::Fragment& f = s.fragments[p];
    own.insert(own.end(), f.params.begin(), f.params.end());
    global.insert(global.end(), f.global.begin(), f.global.end());
    outer.push_back(optimizer_state_dict(*f.outer));
    residual.push_back(f.residual.defined() ? c10::IValue(f.residual.clone()) : c10::IValue());
    if (!f.pending) continue;
    for (auto& w : f.works) w.wait();
    for (auto& r : f.reductions) r.wait();
    f.works.clear();
    f.reductions.clear();
    StateDict d = new_state_dict();
    d.insert("fragment", static_cast<int64_t>(p));
    d.insert("due", f.due);
    d.insert("wire", f.wire.clone());
    d.insert("buffer_wire", f.buffer_wire.defined() ? c10::IValue(f.buffer_wire.clone()) : c10::IValue());
    pending.push_back(d);
  }
  StateDict mine = new_state_dict();
  mine.insert("params", tensor_list(own));
  mine.insert("buffers", tensor_list(s.buffers));
  mine.insert("inner", any_optimizer_state_dict(*s.inner));
  mine.insert("residual", residual);
  StateDict sd = new_state_dict();
  sd.insert("diloco", schedule_of(s.options));
  sd.insert("steps", s.steps);
  sd.insert("synchronizations", s.syncs);
  sd.insert("global", tensor_list(global));
  sd.insert("outer", outer);
  sd.insert("pending", pending);
  sd.insert("workers", gather(mine, s.world));
  return sd;
}

void DiLoCo::load_state_dict(const StateDict& state) {
  Impl& s = *impl_;
  for (const char* key : {"diloco", "steps", "synchronizations", "global", "outer", "pending", "workers"})
    KINDLING_CHECK(state.contains(key), kWho, "no '", key, "' entry: not a DiLoCo state_dict()");
  const StateDict schedule = schedule_of(s.options);
  const StateDict saved = state.at("diloco").toGenericDict();
  for (const auto& item : schedule) {
    const std::string key = item.key().toStringRef();
    KINDLING_CHECK(saved.contains(key) && saved.at(key).toInt() == item.value().toInt(), kWho, key, " was ",
                   saved.contains(key) ? std::to_string(saved.at(key).toInt()) : std::string("absent"),
                   " when saved, ", item.value().toInt(), " now; resume with the same DiLoCoOptions");
  }
  std::vector<at::Tensor> own, global;
  for (const auto& f : s.fragments) {
    own.insert(own.end(), f.params.begin(), f.params.end());
    global.insert(global.end(), f.global.begin(), f.global.end());
  }
  check_shapes(state.at("global"), global, "global");
  const auto workers = state.at("workers").toList();
  KINDLING_CHECK(workers.size() > 0, kWho, "'workers' is empty");
  const StateDict mine = workers.get(s.rank % workers.size()).toGenericDict();
  check_shapes(mine.at("params"), own, "params");
  check_shapes(mine.at("buffers"), s.buffers, "buffers");
  const auto outer = state.at("outer").toList();
  KINDLING_CHECK(outer.size() == s.fragments.size(), kWho, outer.size(), " outer optimizer states for ",
                 s.fragments.size(), " pieces");

  load_any_optimizer_state_dict(*s.inner, mine.at("inner").toGenericDict());
  for (std::size_t g = 0; g < param_groups().size(); ++g) {
    param_groups()[g].set_options(s.inner->param_groups()[g].options().clone());
    s.pushed_lr[g] = s.inner->param_groups()[g].options().get_lr();
  }
  copy_into(state.at("global"), global);
  copy_into(mine.at("params"), own);
  copy_into(mine.at("buffers"), s.buffers);
  const auto residual = mine.at("residual").toList();
  for (std::size_t p = 0; p < s.fragments.size(); ++p) {
    diloco::Fragment& f = s.fragments[p];
    load_optimizer_state_dict(*f.outer, outer.get(p).toGenericDict());
    const auto r = p < residual.size() ? residual.get(p) : c10::IValue();
    f.residual = r.isTensor() && r.toTensor().defined() ? r.toTensor().clone() : at::Tensor();
    f.pending = false;
    f.works.clear();
    f.reductions.clear();
  }
  const auto pending = state.at("pending").toList();
  for (std::size_t k = 0; k < pending.size(); ++k) {
    const StateDict d = pending.get(k).toGenericDict();
    diloco::Fragment& f = s.fragments.at(static_cast<std::size_t>(d.at("fragment").toInt()));
    f.pending = true;
    f.due = d.at("due").toInt();
    f.wire = d.at("wire").toTensor().clone();
    const auto bw = d.at("buffer_wire");
    f.buffer_wire = bw.isTensor() && bw.toTensor().defined() ? bw.toTensor().clone() : at::Tensor();
  }
  s.steps = state.at("steps").toInt();
  s.syncs = state.at("synchronizations").toInt();
}

}  // namespace nn
}  // namespace kindling
