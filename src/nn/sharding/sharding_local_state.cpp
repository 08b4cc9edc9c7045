// A sharded model's local state (kindling/nn/sharding.h): what this rank holds of the parameters
// and of the optimizer's state, as each rank writes it to a file of its own, and its restoration
// from every rank's file of a save at any world size (each file read once, its overlap with this
// rank's pieces copied).
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/nn/optimizer_state.h"
#include "nn/sharding/sharding_state.h"

namespace kindling {
namespace nn {

namespace {

constexpr const char* kFormat = "kindling.sharded_model.v1";

// Copies into `into` (this rank's piece, flat elements [to, to + n) of its parameter) what
// `from` (a saved piece, elements [at, at + m)) holds of it; returns how many elements.
int64_t copy_overlap(const at::Tensor& into, int64_t to, const at::Tensor& from, int64_t at) {
  const int64_t begin = std::max(to, at), end = std::min(to + into.numel(), at + from.numel());
  if (end <= begin) return 0;
  into.narrow(0, begin - to, end - begin).copy_(from.narrow(0, begin - at, end - begin));
  return end - begin;
}

// What a saved file holds of one parameter: its piece and where the piece starts.
struct Saved {
  at::Tensor piece;
  int64_t offset = 0;
};

}  // namespace

StateDict ShardedModel::local_state_dict(const torch::optim::Optimizer* optimizer) const {
  const State& s = *state_;
  StateDict sd = new_state_dict(), pieces = new_state_dict(), offsets = new_state_dict();
  for (const auto& unit : s.units)
    for (std::size_t i = 0; i < unit.params().size(); ++i) {
      pieces.insert(unit.names()[i], unit.shards()[i].detach());
      offsets.insert(unit.names()[i], unit.piece_offset(i));
    }
  StateDict buffers = new_state_dict();
  for (std::size_t b = 0; b < s.buffers.size(); ++b) buffers.insert(s.buffer_names[b], s.buffers[b].detach());
  sd.insert("format", std::string(kFormat));
  sd.insert("world", static_cast<int64_t>(s.world));
  sd.insert("rank", static_cast<int64_t>(s.options.group().rank()));
  sd.insert("parameters", pieces);
  sd.insert("offsets", offsets);
  sd.insert("buffers", buffers);
  if (optimizer) {
    c10::List<std::string> names;
    for (const auto& [u, i] : s.places_of(*optimizer)) names.push_back(s.units[u].names()[i]);
    sd.insert("optimizer", optimizer_state_dict(*optimizer));
    sd.insert("optimizer_parameters", names);  // the module's name of each of its parameters, in order
  }
  return sd;
}

namespace {

// The saved state of one rank, checked: its format, its world, its rank `k`.
StateDict checked_file(const std::function<StateDict(int)>& saved, int k, int64_t world) {
  StateDict sd = saved(k);
  KINDLING_CHECK(sd.contains("format") && sd.at("format").isString() && sd.at("format").toStringRef() == kFormat,
                 detail::kShardingWho, "::load_local_state_dicts: rank ", k, "'s saved state is not a sharded model's "
                 "local_state_dict() (no format '", kFormat, "')");
  KINDLING_CHECK(sd.at("world").toInt() == world && sd.at("rank").toInt() == k, detail::kShardingWho,
                 "::load_local_state_dicts: the state given as rank ", k, " of ", world, " says rank ",
                 sd.at("rank").toInt(), " of ", sd.at("world").toInt(), "; pass every rank's file of one save, in order");
  return sd;
}

using Places = std::vector<std::pair<std::size_t, std::size_t>>;

// Adds to `state` (torch's layout, indices of this rank's optimizer, `places`) what rank k's
// `file` holds of the optimizer's per-parameter state: each tensor shaped as that file's piece,
// its overlap with this rank's piece; any other value (a step count) as it is, from the first
// file that has it.
void add_optimizer_overlaps(const ShardedModel::State& s, const StateDict& file,
                            const std::unordered_map<std::string, Saved>& in_file, const Places& places,
                            c10::impl::GenericDict& state, int k) {
  KINDLING_CHECK(file.contains("optimizer") && file.contains("optimizer_parameters"), detail::kShardingWho,
                 "::load_local_state_dicts: rank ", k, "'s file holds no optimizer state (saved without the "
                 "optimizer); load the model alone, or save the optimizer with it");
  std::unordered_map<std::string, int64_t> index_of;
  for (std::size_t index = 0; index < places.size(); ++index)
    index_of.emplace(s.units[places[index].first].names()[places[index].second], static_cast<int64_t>(index));
  const auto names = file.at("optimizer_parameters").toList();
  for (const auto& kv : file.at("optimizer").toGenericDict().at("state").toGenericDict()) {
    const int64_t saved_index = kv.key().toInt();
    KINDLING_CHECK(saved_index >= 0 && saved_index < static_cast<int64_t>(names.size()), detail::kShardingWho,
                   "::load_local_state_dicts: rank ", k, "'s optimizer state names parameter ", saved_index, " of ",
                   names.size());
    const std::string name = names.get(saved_index).toStringRef();
    auto it = index_of.find(name);
    KINDLING_CHECK(it != index_of.end(), detail::kShardingWho, "::load_local_state_dicts: the saved optimizer has "
                   "state for '", name, "', which this optimizer does not hold");
    const auto [u, i] = places[it->second];
    const Saved& piece = in_file.at(name);
    if (!state.contains(it->second)) state.insert(it->second, new_state_dict());
    auto entry = state.at(it->second).toGenericDict();  // shares the dict held in `state`
    for (const auto& e : kv.value().toGenericDict()) {
      const c10::IValue& v = e.value();
      if (!(v.isTensor() && v.toTensor().dim() == 1 && v.toTensor().numel() == piece.piece.numel())) {
        if (!entry.contains(e.key())) entry.insert(e.key(), v);
        continue;
      }
      if (!entry.contains(e.key()))
        entry.insert(e.key(), at::zeros({s.units[u].shards()[i].numel()}, v.toTensor().options()));
      copy_overlap(entry.at(e.key()).toTensor(), s.units[u].piece_offset(i), v.toTensor(), piece.offset);
    }
  }
}

// Whether the file holds every buffer of the module, in its shape.
void check_buffers(const ShardedModel::State& s, const StateDict& file) {
  const auto saved = file.at("buffers").toGenericDict();
  for (std::size_t b = 0; b < s.buffers.size(); ++b) {
    const std::string& name = s.buffer_names[b];
    KINDLING_CHECK(saved.contains(name) && saved.at(name).toTensor().sizes() == s.buffers[b].sizes(),
                   detail::kShardingWho, "::load_local_state_dicts: buffer '", name, "' is ",
                   saved.contains(name) ? "of another shape" : "missing", " in rank 0's file (another model?)");
  }
}

// The file's buffers into the module's (check_buffers passed).
void load_buffers(const ShardedModel::State& s, const StateDict& file) {
  const auto saved = file.at("buffers").toGenericDict();
  at::NoGradGuard no_grad;
  for (std::size_t b = 0; b < s.buffers.size(); ++b) s.buffers[b].copy_(saved.at(s.buffer_names[b]).toTensor());
}

}  // namespace

void ShardedModel::load_local_state_dicts(const std::function<StateDict(int)>& saved, int64_t saved_world,
                                          torch::optim::Optimizer* optimizer,
                                          const std::function<void()>& before_change) {
  State& s = *state_;
  KINDLING_CHECK(saved_world >= 1, detail::kShardingWho, "::load_local_state_dicts: saved_world must be >= 1, got ",
                 saved_world);
  const auto places = optimizer ? s.places_of(*optimizer) : std::vector<std::pair<std::size_t, std::size_t>>();
  // This rank's new values, filled from the files' overlaps and checked complete before any is used.
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> by_name;
  std::vector<std::vector<at::Tensor>> values(s.units.size());
  std::vector<std::vector<int64_t>> covered(s.units.size());
  for (std::size_t u = 0; u < s.units.size(); ++u)
    for (std::size_t i = 0; i < s.units[u].params().size(); ++i) {
      by_name.emplace(s.units[u].names()[i], std::make_pair(u, i));
      values[u].push_back(at::empty_like(s.units[u].shards()[i]).detach());
      covered[u].push_back(0);
    }
  StateDict first = new_state_dict(), state = c10::impl::GenericDict(c10::IntType::get(), c10::AnyType::get());
  for (int k = 0; k < saved_world; ++k) {
    StateDict file = checked_file(saved, k, saved_world);
    const auto pieces = file.at("parameters").toGenericDict(), offsets = file.at("offsets").toGenericDict();
    KINDLING_CHECK(static_cast<std::size_t>(pieces.size()) == by_name.size(), detail::kShardingWho,
                   "::load_local_state_dicts: rank ", k, "'s file holds ", pieces.size(), " parameters, the model ",
                   by_name.size(), " (another model?)");
    std::unordered_map<std::string, Saved> in_file;
    for (const auto& kv : pieces) {
      const std::string& name = kv.key().toStringRef();
      auto it = by_name.find(name);
      KINDLING_CHECK(it != by_name.end(), detail::kShardingWho, "::load_local_state_dicts: rank ", k,
                     "'s file holds parameter '", name, "', which the model does not have (another model?)");
      const auto [u, i] = it->second;
      Saved piece{kv.value().toTensor(), offsets.at(name).toInt()};
      KINDLING_CHECK(piece.offset >= 0 && piece.offset + piece.piece.numel() <= s.units[u].size(i), detail::kShardingWho,
                     "::load_local_state_dicts: rank ", k, "'s piece of '", name, "' lies outside its ",
                     s.units[u].size(i), " elements (another model?)");
      covered[u][i] += copy_overlap(values[u][i], s.units[u].piece_offset(i), piece.piece, piece.offset);
      in_file.emplace(name, piece);
    }
    if (optimizer) add_optimizer_overlaps(s, file, in_file, places, state, k);
    if (k == 0) first = std::move(file);
  }
  for (const auto& [name, place] : by_name) {
    const auto [u, i] = place;
    KINDLING_CHECK(covered[u][i] == values[u][i].numel(), detail::kShardingWho, "::load_local_state_dicts: the files "
                   "cover ", covered[u][i], " of the ", values[u][i].numel(), " elements this rank keeps of '", name,
                   "' (a save's files missing or mixed with another's?)");
  }
  check_buffers(s, first);
  if (before_change) before_change();
  if (optimizer) {  // checks before it changes anything
    StateDict local = first.at("optimizer").toGenericDict();
    local.insert_or_assign("state", state);
    load_optimizer_state_dict(*optimizer, local);
  }
  load_buffers(s, first);
  at::NoGradGuard no_grad;
  for (std::size_t u = 0; u < s.units.size(); ++u) {
    for (std::size_t i = 0; i < values[u].size(); ++i) s.units[u].shards()[i].copy_(values[u][i]);
    s.units[u].stepped_since_gather = true;  // the next forward gathers the new values
  }
}

}  // namespace nn
}  // namespace kindling
