// ZeroRedundancyOptimizer's state dict: every rank's parts put together in torch's layout, and
// a whole state cut into this rank's parts (kindling/nn/zero.h).
#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/nn/optimizer_state.h"
#include "nn/optimizer_kind.h"
#include "zero_impl.h"

namespace kindling {
namespace nn {
namespace {

using Dict = c10::impl::GenericDict;

Dict new_index_dict() { return Dict(c10::IntType::get(), c10::AnyType::get()); }
Dict new_string_dict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

// One parameter's state from its parts (each {offset, entry}, any order): tensors laid end to
// end in offset order and shaped as the parameter, other values (Adam's step) from the first.
Dict join_parts(std::vector<std::pair<int64_t, Dict>> parts, const at::Tensor& param) {
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Dict joined = new_string_dict();
  for (const auto& kv : parts.front().second) {
    const std::string key = kv.key().toStringRef();
    if (!kv.value().isTensor()) {
      joined.insert(key, kv.value());
      continue;
    }
    std::vector<at::Tensor> pieces;
    for (const auto& part : parts) pieces.push_back(part.second.at(key).toTensor().reshape(-1));
    at::Tensor whole = at::cat(pieces);
    KINDLING_CHECK(whole.numel() == param.numel(), "kindling::nn::ZeroRedundancyOptimizer::state_dict: the parts of '",
                   key, "' hold ", whole.numel(), " elements for a parameter of ", param.numel(),
                   "; the ranks' layouts differ (a bug: please report it)");
    joined.insert(key, whole.view(param.sizes()));
  }
  return joined;
}

}  // namespace

StateDict ZeroRedundancyOptimizer::state_dict() const {
  const Impl& s = *impl_;
  StateDict sd = optimizer_state_dict(*this);  // the groups' options; the base holds no state
  if (!s.layout) {
    if (s.pending) sd.insert_or_assign("state", *s.pending);
    return sd;
  }
  const zero::Layout& l = *s.layout;
  const Dict mine = s.local_state();
  std::vector<Dict> of_rank{mine};
  if (l.size > 1) {
    const std::vector<char> bytes = torch::pickle_save(mine);
    const auto all = dist::all_gather(std::string(bytes.begin(), bytes.end()), s.group);
    of_rank.clear();
    for (const auto& b : all) of_rank.push_back(torch::pickle_load(std::vector<char>(b.begin(), b.end())).toGenericDict());
  }
  std::map<std::size_t, std::vector<std::pair<int64_t, Dict>>> parts;  // parameter -> its parts' states
  for (int q = 0; q < static_cast<int>(of_rank.size()); ++q) {
    const std::vector<zero::Piece> pieces = q == l.rank ? s.pieces : l.pieces_of(q, s.group_of);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      // A parameter in no bucket is stepped whole on every rank: rank 0's copy stands for all.
      if ((pieces[i].bucket < 0 && q != 0) || !of_rank[q].contains(static_cast<int64_t>(i))) continue;
      parts[pieces[i].param].emplace_back(pieces[i].offset, of_rank[q].at(static_cast<int64_t>(i)).toGenericDict());
    }
  }
  Dict state = new_index_dict();
  for (auto& [param, list] : parts) state.insert(static_cast<int64_t>(param), join_parts(std::move(list), s.params[param]));
  sd.insert_or_assign("state", state);
  return sd;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& state) {
  const Dict states = detail::load_group_options(*this, state, "kindling::nn::ZeroRedundancyOptimizer::load_state_dict");
  impl_->pending = states.copy();
  if (impl_->layout) impl_->apply_pending();
}

Dict ZeroRedundancyOptimizer::Impl::local_state() const {
  Dict mine = new_index_dict();
  for (std::size_t k = 0; k < inner.size(); ++k) {
    if (!inner[k]) continue;
    for (const auto& kv : optimizer_state_dict(*inner[k]).at("state").toGenericDict())
      mine.insert(static_cast<int64_t>(inner_pieces[k][static_cast<std::size_t>(kv.key().toInt())]), kv.value());
  }
  return mine;
}

void ZeroRedundancyOptimizer::Impl::apply_pending() {
  for (std::size_t k = 0; k < inner.size(); ++k) {
    if (!inner[k]) continue;
    Dict mine = new_index_dict();
    for (std::size_t j = 0; j < inner_pieces[k].size(); ++j) {
      const zero::Piece& piece = pieces[inner_pieces[k][j]];
      const auto key = static_cast<int64_t>(piece.param);
      if (!pending->contains(key)) continue;
      const at::Tensor& param = params[piece.param];
      Dict entry = new_string_dict();
      for (const auto& kv : pending->at(key).toGenericDict()) {
        const c10::IValue& v = kv.value();
        entry.insert(kv.key(), v.isTensor() ? c10::IValue(part(piece, v.toTensor()).to(param.device()).clone()) : v);
      }
      mine.insert(static_cast<int64_t>(j), entry);
    }
    StateDict sd = optimizer_state_dict(*inner[k]);
    sd.insert_or_assign("state", mine);
    load_optimizer_state_dict(*inner[k], sd);
  }
  pending.reset();
}

int64_t ZeroRedundancyOptimizer::local_state_numel() const {
  int64_t n = 0;
  for (const auto& kv : impl_->local_state())
    for (const auto& entry : kv.value().toGenericDict())
      if (entry.value().isTensor()) n += entry.value().toTensor().numel();
  return n;
}

}  // namespace nn
}  // namespace kindling
