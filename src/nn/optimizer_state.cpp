// LibTorch optimizers' state in Python torch's state_dict layout (kindling/nn/optimizer_state.h).
#include "kindling/nn/optimizer_state.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>
#include <string>
#include <type_traits>

#include "kindling/error.h"

namespace kindling {
namespace nn {
namespace {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

// The optimizer's state is keyed by the parameter's TensorImpl address: as a string in
// LibTorch 1.x, the void* itself in 2.x.
using StateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
[[maybe_unused]] std::string to_state_key(void* impl, std::string*) {
  std::ostringstream s;
  s << impl;
  return s.str();
}
[[maybe_unused]] void* to_state_key(void* impl, void**) { return impl; }
StateKey state_key(const at::Tensor& p) {
  return to_state_key(p.unsafeGetTensorImpl(), static_cast<StateKey*>(nullptr));
}

c10::IValue tensor_or_none(const at::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }
at::Tensor tensor_of(const c10::impl::GenericDict& d, const char* key) {
  if (!d.contains(key) || d.at(key).isNone()) return at::Tensor();
  return d.at(key).toTensor();
}
c10::impl::GenericDict new_dict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

enum class Kind { kSgd, kAdam, kAdamW, kOther };
Kind kind_of(const OptimizerOptions& o) {
  if (dynamic_cast<const torch::optim::SGDOptions*>(&o)) return Kind::kSgd;
  if (dynamic_cast<const torch::optim::AdamOptions*>(&o)) return Kind::kAdam;
  if (dynamic_cast<const torch::optim::AdamWOptions*>(&o)) return Kind::kAdamW;
  return Kind::kOther;
}

template <typename O>
void adam_to(const O& a, c10::impl::GenericDict& g) {
  g.insert("lr", a.lr());
  g.insert("betas", c10::ivalue::Tuple::create(std::get<0>(a.betas()), std::get<1>(a.betas())));
  g.insert("eps", a.eps());
  g.insert("weight_decay", a.weight_decay());
  g.insert("amsgrad", a.amsgrad());
}
void options_to(const OptimizerOptions& o, c10::impl::GenericDict& g) {
  if (auto* s = dynamic_cast<const torch::optim::SGDOptions*>(&o)) {
    g.insert("lr", s->lr());
    g.insert("momentum", s->momentum());
    g.insert("dampening", s->dampening());
    g.insert("weight_decay", s->weight_decay());
    g.insert("nesterov", s->nesterov());
  } else if (auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&o)) {
    adam_to(*a, g);
  } else if (auto* w = dynamic_cast<const torch::optim::AdamWOptions*>(&o)) {
    adam_to(*w, g);
  }
}
template <typename O>
void adam_from(const c10::impl::GenericDict& g, O& a) {
  const auto betas = g.at("betas").toTuple()->elements();
  a.lr(g.at("lr").toDouble()).eps(g.at("eps").toDouble()).weight_decay(g.at("weight_decay").toDouble());
  a.amsgrad(g.at("amsgrad").toBool()).betas(std::make_tuple(betas[0].toDouble(), betas[1].toDouble()));
}
void options_from(const c10::impl::GenericDict& g, OptimizerOptions& o) {
  if (auto* s = dynamic_cast<torch::optim::SGDOptions*>(&o)) {
    s->lr(g.at("lr").toDouble()).momentum(g.at("momentum").toDouble()).dampening(g.at("dampening").toDouble());
    s->weight_decay(g.at("weight_decay").toDouble()).nesterov(g.at("nesterov").toBool());
  } else if (auto* a = dynamic_cast<torch::optim::AdamOptions*>(&o)) {
    adam_from(g, *a);
  } else if (auto* w = dynamic_cast<torch::optim::AdamWOptions*>(&o)) {
    adam_from(g, *w);
  }
}

template <typename S>
void adam_state_to(const S& a, c10::impl::GenericDict& d) {
  d.insert("step", a.step());
  d.insert("exp_avg", tensor_or_none(a.exp_avg()));
  d.insert("exp_avg_sq", tensor_or_none(a.exp_avg_sq()));
  d.insert("max_exp_avg_sq", tensor_or_none(a.max_exp_avg_sq()));
}
c10::impl::GenericDict param_state_to(const OptimizerParamState& s) {
  c10::impl::GenericDict d = new_dict();
  if (auto* m = dynamic_cast<const torch::optim::SGDParamState*>(&s)) {
    d.insert("momentum_buffer", tensor_or_none(m->momentum_buffer()));
  } else if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(&s)) {
    adam_state_to(*a, d);
  } else if (auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(&s)) {
    adam_state_to(*w, d);
  }
  return d;
}
// A state tensor of its own: training on must not change the dict it was loaded from.
at::Tensor owned(const c10::impl::GenericDict& d, const char* key) {
  const at::Tensor t = tensor_of(d, key);
  return t.defined() ? t.clone() : t;
}
template <typename S>
std::unique_ptr<OptimizerParamState> adam_state_from(const c10::impl::GenericDict& d) {
  auto s = std::make_unique<S>();
  s->step(d.at("step").toInt());
  s->exp_avg(owned(d, "exp_avg"));
  s->exp_avg_sq(owned(d, "exp_avg_sq"));
  s->max_exp_avg_sq(owned(d, "max_exp_avg_sq"));
  return s;
}
std::unique_ptr<OptimizerParamState> param_state_from(Kind kind, const c10::impl::GenericDict& d) {
  if (kind == Kind::kSgd) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(owned(d, "momentum_buffer"));
    return s;
  }
  if (kind == Kind::kAdam) return adam_state_from<torch::optim::AdamParamState>(d);
  return adam_state_from<torch::optim::AdamWParamState>(d);
}

// Every per-parameter buffer must have its parameter's shape: a wrong one would otherwise only
// fail (or broadcast silently) at the next step.
void check_state_shapes(const torch::optim::Optimizer& optimizer, const c10::impl::GenericDict& states) {
  int64_t index = 0;
  const auto& groups = optimizer.param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    for (const auto& p : groups[i].params()) {
      if (states.contains(index)) {
        const auto entry = states.at(index).toGenericDict();
        for (const char* key : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
          const at::Tensor t = tensor_of(entry, key);
          KINDLING_CHECK(!t.defined() || t.sizes() == p.sizes(), "the optimizer state of parameter ", index,
                         " (group ", i, ") has a '", key, "' of shape ", t.sizes(), " but the parameter's shape is ",
                         p.sizes(), "; the checkpoint was saved from a different model");
        }
      }
      ++index;
    }
  }
}

}  // namespace

SelfStatedOptimizer::~SelfStatedOptimizer() = default;

bool has_torch_state_layout(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups())
    if (kind_of(group.options()) == Kind::kOther) return false;
  return !optimizer.param_groups().empty();
}

StateDict optimizer_state_dict(const torch::optim::Optimizer& optimizer) {
  KINDLING_CHECK(has_torch_state_layout(optimizer), "kindling::nn::optimizer_state_dict: the optimizer is not "
                 "SGD, Adam or AdamW (or has no parameter group); only those have torch's state_dict layout");
  c10::impl::GenericDict states(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList groups(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    c10::impl::GenericDict g = new_dict();
    options_to(group.options(), g);
    c10::List<int64_t> params;
    for (const auto& p : group.params()) {
      auto it = optimizer.state().find(state_key(p));
      if (it != optimizer.state().end()) states.insert(index, param_state_to(*it->second));
      params.push_back(index++);
    }
    g.insert("params", params);
    groups.push_back(g);
  }
  StateDict sd = new_state_dict();
  sd.insert("state", states);
  sd.insert("param_groups", groups);
  return sd;
}

void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state) {
  KINDLING_CHECK(has_torch_state_layout(optimizer), "the checkpoint holds an SGD/Adam/AdamW state, but this "
                 "optimizer is another kind; load it into the kind of optimizer that saved it");
  KINDLING_CHECK(state.contains("param_groups") && state.contains("state"),
                 "missing key 'param_groups' or 'state' in the optimizer's state");
  const auto groups = state.at("param_groups").toList();
  auto& mine = optimizer.param_groups();
  KINDLING_CHECK(groups.size() == mine.size(), "the checkpoint has ", groups.size(),
                 " parameter groups but the optimizer has ", mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const auto n = groups.get(i).toGenericDict().at("params").toIntList().size();
    KINDLING_CHECK(n == mine[i].params().size(), "parameter group ", i, " has ", n,
                   " parameters in the checkpoint but ", mine[i].params().size(), " in the optimizer");
  }
  const auto states = state.at("state").toGenericDict();
  check_state_shapes(optimizer, states);
  // Checked: apply.
  int64_t index = 0;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    options_from(groups.get(i).toGenericDict(), mine[i].options());
    const Kind kind = kind_of(mine[i].options());
    for (const auto& p : mine[i].params()) {
      if (states.contains(index)) {
        optimizer.state()[state_key(p)] = param_state_from(kind, states.at(index).toGenericDict());
      } else {
        optimizer.state().erase(state_key(p));
      }
      ++index;
    }
  }
}

StateDict any_optimizer_state_dict(const torch::optim::Optimizer& optimizer) {
  if (has_torch_state_layout(optimizer)) return optimizer_state_dict(optimizer);
  StateDict sd = new_state_dict();
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string s = bytes.str();
  sd.insert("torch_archive",
            at::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())}, at::kByte).clone());
  return sd;
}

void load_any_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state) {
  if (!state.contains("torch_archive")) {
    load_optimizer_state_dict(optimizer, state);
    return;
  }
  // LibTorch's archive reader is its TorchScript loader, which can run code a crafted
  // file holds: it is reached only for the optimizer kinds kindling cannot save itself.
  KINDLING_CHECK(!has_torch_state_layout(optimizer),
                 "the checkpoint holds a LibTorch optimizer archive (saved from an optimizer other "
                 "than SGD/Adam/AdamW), but this optimizer is SGD, Adam or AdamW; load it into the "
                 "kind of optimizer that saved it");
  const at::Tensor bytes = state.at("torch_archive").toTensor().contiguous();
  KINDLING_CHECK(bytes.scalar_type() == at::kByte && bytes.dim() == 1,
                 "the optimizer's 'torch_archive' entry must be a 1-D uint8 tensor, got ",
                 c10::toString(bytes.scalar_type()), " of shape ", bytes.sizes());
  std::istringstream in(std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel()));
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
}

}  // namespace nn
}  // namespace kindling
