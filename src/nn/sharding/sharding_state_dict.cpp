// A sharded model's whole state (kindling/nn/sharding.h): its parameters and its optimizer's
// state put together from every rank's shards in the module's shapes (what DDP and Python torch
// save), and cut up again for this rank at any world size.
#include <torch/csrc/autograd/grad_mode.h>

#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/dist/same_settings.h"
#include "kindling/error.h"
#include "kindling/nn/optimizer_state.h"
#include "nn/sharding/sharding_state.h"

namespace kindling {
namespace nn {

namespace {

// Which tensors belong to a live sharded model: the module's parameters (1) and the shards (2),
// with the model's face (what shard_owner gives).
struct Role {
  int role = 0;
  const ShardedModel* model = nullptr;
};
std::mutex registry_mu;
std::unordered_map<const void*, Role>& registry() {
  static std::unordered_map<const void*, Role> roles;
  return roles;
}

Role role_of(const at::Tensor& t) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry().find(t.unsafeGetTensorImpl());
  return it == registry().end() ? Role() : it->second;
}

}  // namespace

namespace detail {
int sharded_role(const at::Tensor& t) { return role_of(t).role; }
const ShardedModel* shard_owner(const at::Tensor& t) {
  const Role r = role_of(t);
  return r.role == 2 ? r.model : nullptr;
}
}  // namespace detail

std::vector<std::pair<std::size_t, std::size_t>> ShardedModel::State::places_of(
    const torch::optim::Optimizer& optimizer) const {
  std::unordered_map<const void*, std::pair<std::size_t, std::size_t>> of;
  for (std::size_t u = 0; u < units.size(); ++u)
    for (std::size_t i = 0; i < units[u].shards().size(); ++i)
      of.emplace(units[u].shards()[i].unsafeGetTensorImpl(), std::make_pair(u, i));
  std::vector<std::pair<std::size_t, std::size_t>> all;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      auto it = of.find(p.unsafeGetTensorImpl());
      KINDLING_CHECK(it != of.end(), detail::kShardingWho, ": the optimizer's parameter ", all.size(),
                     " is not one of this model's shards; its state needs an optimizer built on model.parameters()");
      all.push_back(it->second);
    }
  return all;
}

void ShardedModel::State::enroll(bool add, const ShardedModel* face) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto mark = [add, face](const at::Tensor& t, int role) {
    if (add) {
      registry()[t.unsafeGetTensorImpl()] = Role{role, face};
    } else {
      registry().erase(t.unsafeGetTensorImpl());
    }
  };
  for (const auto& unit : units) {
    for (const auto& p : unit.params()) mark(p, 1);
    for (const auto& s : unit.shards()) mark(s, 2);
  }
}

void ShardedModel::load_full_parameters(const std::vector<std::pair<std::string, at::Tensor>>& whole) {
  std::unordered_map<std::string, at::Tensor> by_name(whole.begin(), whole.end());
  for (const auto& unit : state_->units)
    for (std::size_t i = 0; i < unit.params().size(); ++i) {
      auto it = by_name.find(unit.names()[i]);
      KINDLING_CHECK(it != by_name.end(), detail::kShardingWho, ": no value for parameter '", unit.names()[i], "'");
      KINDLING_CHECK(it->second.sizes() == unit.shape(i), detail::kShardingWho, ": parameter '", unit.names()[i],
                     "' has shape ", it->second.sizes(), " in what is loaded but ", unit.shape(i), " in the model");
    }
  KINDLING_CHECK(by_name.size() == state_->order_of_params.size(), detail::kShardingWho, ": ", by_name.size(),
                 " values for the model's ", state_->order_of_params.size(), " parameters");
  at::NoGradGuard no_grad;
  for (auto& unit : state_->units) {
    for (std::size_t i = 0; i < unit.params().size(); ++i) {
      const at::Tensor& piece = unit.shards()[i];
      piece.copy_(by_name.at(unit.names()[i]).reshape({-1}).narrow(0, unit.piece_offset(i), piece.numel()));
    }
    unit.stepped_since_gather = true;  // the next forward gathers the new values
  }
}

StateDict ShardedModel::full_optimizer_state_dict(const torch::optim::Optimizer& optimizer) const {
  const auto where = state_->places_of(optimizer);
  StateDict local = optimizer_state_dict(optimizer);
  const auto pieces = local.at("state").toGenericDict();
  std::ostringstream layout;  // every rank must gather the same entries, in the same order
  for (const auto& kv : pieces)
    for (const auto& e : kv.value().toGenericDict()) layout << kv.key().toInt() << '.' << e.key().toStringRef() << ';';
  dist::require_same_settings(detail::kShardingWho, {{"optimizer state entries", layout.str()}}, state_->options.group());
  at::NoGradGuard no_grad;
  auto whole = c10::impl::GenericDict(c10::IntType::get(), c10::AnyType::get());
  for (const auto& kv : pieces) {
    const auto [u, i] = where.at(kv.key().toInt());
    const auto& unit = state_->units[u];
    auto entry = new_state_dict();
    for (const auto& e : kv.value().toGenericDict()) {
      c10::IValue value = e.value();
      if (value.isTensor() && value.toTensor().dim() == 1 && value.toTensor().numel() == unit.shards()[i].numel()) {
        const at::Tensor piece = value.toTensor();
        at::Tensor chunk = at::zeros({unit.chunk()}, piece.options());
        chunk.narrow(0, unit.shard_begin(i), piece.numel()).copy_(piece);
        at::Tensor all = at::empty({unit.full().numel()}, piece.options());
        dist::all_gather_into(all, chunk, state_->options.group());
        value = all.narrow(0, unit.offset(i), unit.size(i)).view(unit.shape(i)).clone();
      }
      entry.insert(e.key(), value);
    }
    whole.insert(kv.key(), entry);
  }
  local.insert_or_assign("state", whole);
  return local;
}

void ShardedModel::load_full_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state) {
  const auto where = state_->places_of(optimizer);
  KINDLING_CHECK(state.contains("state") && state.at("state").isGenericDict(), detail::kShardingWho,
                 ": the optimizer state has no 'state' dict (torch's layout expected)");
  auto mine = c10::impl::GenericDict(c10::IntType::get(), c10::AnyType::get());
  for (const auto& kv : state.at("state").toGenericDict()) {
    const int64_t index = kv.key().toInt();
    KINDLING_CHECK(index >= 0 && index < static_cast<int64_t>(where.size()), detail::kShardingWho,
                   ": the optimizer state names parameter ", index, " but the optimizer has ", where.size());
    const auto [u, i] = where[index];
    const auto& unit = state_->units[u];
    auto entry = new_state_dict();
    for (const auto& e : kv.value().toGenericDict()) {
      c10::IValue value = e.value();
      if (value.isTensor() && value.toTensor().sizes() == unit.shape(i))
        value = value.toTensor().reshape({-1}).narrow(0, unit.piece_offset(i), unit.shards()[i].numel()).clone();
      entry.insert(e.key(), value);
    }
    mine.insert(index, entry);
  }
  StateDict local = new_state_dict();
  for (const auto& kv : state) local.insert(kv.key(), kv.value());
  local.insert_or_assign("state", mine);
  load_optimizer_state_dict(optimizer, local);
}

}  // namespace nn
}  // namespace kindling
