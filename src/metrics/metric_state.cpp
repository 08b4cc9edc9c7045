// kindling::metrics::Metric's state_dict: every rank's registered accumulators, gathered as
// pickled dicts (one all_gather of bytes, whatever the number and kinds of accumulators).
#include <ATen/ATen.h>
#include <torch/serialize.h>

#include "kindling/metrics/metric.h"
#include "metrics/reshard.h"

namespace kindling {
namespace metrics {

void Metric::register_state(const std::string& key, std::function<c10::IValue()> get,
                            std::function<std::string(const c10::IValue&)> check,
                            std::function<void(const c10::IValue&)> set, Reshard reshard) {
  for (const StateSlot& s : state_slots_) {
    KINDLING_INTERNAL_ASSERT(s.key != key, "kindling::metrics::Metric: the state key '", key, "' is registered twice");
  }
  state_slots_.push_back({key, std::move(get), std::move(check), std::move(set), reshard});
}

void Metric::register_member_state(const std::string& prefix, const Metric& member) {
  for (const StateSlot& s : member.state_slots_) register_state(prefix + s.key, s.get, s.check, s.set, s.reshard);
}

void Metric::register_state(const std::string& key, at::Tensor* slot, Reshard reshard) {
  register_state(
      key, [slot]() { return slot->defined() ? c10::IValue(slot->detach().cpu()) : c10::IValue(); },
      [](const c10::IValue& v) { return v.isTensor() || v.isNone() ? std::string() : "a tensor or None"; },
      [this, slot](const c10::IValue& v) { *slot = v.isNone() ? at::Tensor() : v.toTensor().to(device()).clone(); },
      reshard);
}

void Metric::register_state(const std::string& key, int64_t* slot, Reshard reshard) {
  register_state(
      key, [slot]() { return c10::IValue(*slot); },
      [](const c10::IValue& v) { return v.isInt() ? std::string() : "an integer"; },
      [slot](const c10::IValue& v) { *slot = v.toInt(); }, reshard);
}

void Metric::register_state(const std::string& key, std::vector<at::Tensor>* slot, Reshard reshard) {
  register_state(
      key,
      [slot]() {
        c10::List<at::Tensor> list;
        for (const at::Tensor& t : *slot) list.push_back(t.detach().cpu());
        return c10::IValue(list);
      },
      [](const c10::IValue& v) { return v.isTensorList() ? std::string() : "a list of tensors"; },
      [this, slot](const c10::IValue& v) {
        std::vector<at::Tensor> tensors;
        for (const at::Tensor& t : v.toTensorVector()) tensors.push_back(t.to(device()).clone());
        *slot = std::move(tensors);
      },
      reshard);
}

StateDict Metric::state_dict() const {
  StateDict local = new_state_dict();
  for (const StateSlot& s : state_slots_) local.insert(s.key, s.get());
  std::vector<std::string> per_rank;
  if (dist::get_world_size() > 1) {
    const std::vector<char> bytes = torch::pickle_save(local);
    per_rank = dist::all_gather(std::string(bytes.begin(), bytes.end()));
  }
  StateDict state = new_state_dict();
  for (const StateSlot& s : state_slots_) state.insert(s.key, c10::impl::GenericList(c10::AnyType::get()));
  for (size_t r = 0; r < std::max<size_t>(per_rank.size(), 1); ++r) {
    StateDict of_rank = local;
    if (!per_rank.empty()) {
      of_rank = torch::pickle_load(std::vector<char>(per_rank[r].begin(), per_rank[r].end())).toGenericDict();
    }
    for (const StateSlot& s : state_slots_) state.at(s.key).toList().push_back(of_rank.at(s.key));
  }
  return state;
}

void Metric::load_state_dict(const StateDict& state) {
  const std::string who = "kindling::metrics::" + name() + "::load_state_dict";
  const int64_t world = std::max(dist::get_world_size(), 1);
  const int64_t rank = dist::get_world_size() > 1 ? dist::get_rank() : 0;
  std::vector<c10::IValue> mine;
  size_t saved_ranks = 0;
  for (const StateSlot& s : state_slots_) {
    KINDLING_CHECK(state.contains(s.key), who, ": the state has no key '", s.key,
                   "'; it was not saved from this kind of metric (expected the keys of ", name(), "::state_dict())");
    const c10::IValue& entry = state.at(s.key);
    KINDLING_CHECK(entry.isList(), who, ": '", s.key, "' should be a list of one value per rank, got ",
                   entry.tagKind());
    const auto list = entry.toList();
    KINDLING_CHECK(!list.empty(), who, ": '", s.key, "' holds no rank's state");
    KINDLING_CHECK(mine.empty() || list.size() == saved_ranks, who, ": '", state_slots_.front().key,
                   "' holds the state of ", saved_ranks, " rank(s) but '", s.key, "' of ", list.size(),
                   "; the lists of one metric's state_dict() have one length (the saved world size)");
    saved_ranks = list.size();
    for (size_t r = 0; r < list.size(); ++r) {
      if (static_cast<int64_t>(list.size()) == world && static_cast<int64_t>(r) != rank) continue;
      const std::string why = s.check(list.get(r));
      KINDLING_CHECK(why.empty(), who, ": '", s.key, "' of rank ", r, " should be ", why, ", got ",
                     list.get(r).tagKind());
    }
    const c10::IValue value = static_cast<int64_t>(list.size()) == world
                                  ? list.get(static_cast<size_t>(rank))
                                  : ::kindling::detail::reshard_metric_state(s.reshard, list, rank, world, who, s.key);
    mine.push_back(value);
  }
  for (size_t i = 0; i < state_slots_.size(); ++i) state_slots_[i].set(mine[i]);
  restored_ = true;
}

}  // namespace metrics
}  // namespace kindling
