// kindling::metrics::Metric's state_dict: every rank's registered accumulators, gathered as
// pickled dicts (one all_gather of bytes, whatever the number and kinds of accumulators), in
// ignite's layout; load_state_dict reads it and the per-key lists kindling wrote before.
#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <optional>
#include <string>
#include <vector>

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

namespace {

// ignite's (0.4.13 to 0.5.5) only key of a metric's state_dict(): a list of one dict per rank.
const char* const kPerRank = "__metric_state_per_rank";

// Accumulators kindling saves beyond ignite's _state_dict_all_req_keys (the input type a
// classification metric inferred, also a group member's): a state ignite wrote lacks them,
// and they keep their value (a fresh metric infers them from its next batch).
bool beyond_ignite(const std::string& key) {
  const std::string last = key.substr(key.rfind('/') + 1);
  return last == "_type" || last == "_num_classes";
}

// The state in the layout kindling wrote before it wrote ignite's (what the checks below
// read): {key: [rank 0's value, ...]}, from ignite's layout {"__metric_state_per_rank": [{key:
// value}, ...]}; a state in that older layout is returned as it is. Throws kindling::UsageError naming the
// saved rank and the key that ignite's layout lacks.
StateDict by_key(const StateDict& state, const std::vector<std::string>& keys, const std::string& who,
                 const std::string& metric) {
  if (!(state.size() == 1 && state.contains(kPerRank))) return state;
  const c10::IValue& entry = state.at(kPerRank);
  KINDLING_CHECK(entry.isList(), who, ": '", kPerRank, "' should be a list of one dict per rank, got ",
                 entry.tagKind());
  const auto ranks = entry.toList();
  KINDLING_CHECK(!ranks.empty(), who, ": '", kPerRank, "' holds no rank's state");
  StateDict lists = new_state_dict();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const c10::IValue of_rank = ranks.get(r);
    KINDLING_CHECK(of_rank.isGenericDict(), who, ": '", kPerRank, "' entry ", r, " (saved rank ", r,
                   "'s state) should be a dict, got ", of_rank.tagKind());
    const auto dict = of_rank.toGenericDict();
    for (const std::string& key : keys) {
      if (beyond_ignite(key) && !ranks.get(0).toGenericDict().contains(key)) continue;  // saved by ignite
      KINDLING_CHECK(dict.contains(key), who, ": the state of saved rank ", r, " has no key '", key,
                     "'; it was not saved from this kind of metric (expected the keys of ", metric, "::state_dict())");
      if (!lists.contains(key)) lists.insert(key, c10::impl::GenericList(c10::AnyType::get()));
      lists.at(key).toList().push_back(dict.at(key));
    }
  }
  return lists;
}

}  // namespace

StateDict Metric::state_dict() const {
  StateDict local = new_state_dict();
  for (const StateSlot& s : state_slots_) local.insert(s.key, s.get());
  c10::impl::GenericList ranks(c10::AnyType::get());
  if (dist::get_world_size() > 1) {
    const std::vector<char> bytes = torch::pickle_save(local);
    for (const std::string& of_rank : dist::all_gather(std::string(bytes.begin(), bytes.end()))) {
      ranks.push_back(torch::pickle_load(std::vector<char>(of_rank.begin(), of_rank.end())).toGenericDict());
    }
  } else {
    ranks.push_back(local);
  }
  StateDict state = new_state_dict();
  state.insert(kPerRank, ranks);
  return state;
}

void Metric::load_state_dict(const StateDict& saved) {
  const std::string who = "kindling::metrics::" + name() + "::load_state_dict";
  std::vector<std::string> keys;
  for (const StateSlot& s : state_slots_) keys.push_back(s.key);
  const StateDict state = by_key(saved, keys, who, name());
  const int64_t world = std::max(dist::get_world_size(), 1);
  const int64_t rank = dist::get_world_size() > 1 ? dist::get_rank() : 0;
  std::vector<std::optional<c10::IValue>> mine;  // unset: a key beyond ignite's that the state lacks
  size_t saved_ranks = 0;
  std::string first;
  for (const StateSlot& s : state_slots_) {
    if (beyond_ignite(s.key) && !state.contains(s.key)) {
      mine.emplace_back();
      continue;
    }
    KINDLING_CHECK(state.contains(s.key), who, ": the state has no key '", s.key,
                   "'; it was not saved from this kind of metric (expected the keys of ", name(), "::state_dict())");
    const c10::IValue& entry = state.at(s.key);
    KINDLING_CHECK(entry.isList(), who, ": '", s.key, "' should be a list of one value per rank, got ",
                   entry.tagKind());
    const auto list = entry.toList();
    KINDLING_CHECK(!list.empty(), who, ": '", s.key, "' holds no rank's state");
    KINDLING_CHECK(first.empty() || list.size() == saved_ranks, who, ": '", first, "' holds the state of ", saved_ranks,
                   " rank(s) but '", s.key, "' of ", list.size(),
                   "; the lists of one metric's state_dict() have one length (the saved world size)");
    if (first.empty()) first = s.key;
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
  for (size_t i = 0; i < state_slots_.size(); ++i) {
    if (mine[i]) state_slots_[i].set(*mine[i]);
  }
  restored_ = true;
}

}  // namespace metrics
}  // namespace kindling
