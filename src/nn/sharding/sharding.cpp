// A sharded model's construction and its public face (kindling/nn/sharding.h): the units found
// in the module, the ranks' agreement on them, the parameters broadcast, each unit's shard kept.
#include "kindling/nn/sharding.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <sstream>
#include <unordered_map>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/dist/same_settings.h"
#include "kindling/error.h"
#include "nn/broadcast_coalesced.h"
#include "nn/sharding/sharding_state.h"

namespace kindling {
namespace nn {

namespace detail {
UnitCalls::~UnitCalls() = default;
}  // namespace detail

UnitBase::~UnitBase() = default;

void UnitBase::bind(std::weak_ptr<detail::UnitCalls> calls, std::size_t index) {
  calls_ = std::move(calls);
  index_ = index;
}

namespace {

// A submodule whose parameters are gathered as one.
struct FoundUnit {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  UnitBase* unit = nullptr;  // null: a Sequential's child
};

// The Units in `module` (outermost only; one inside another is refused), else its children
// when `children_are_units`.
std::vector<FoundUnit> find_units(torch::nn::Module& module, bool children_are_units) {
  std::vector<FoundUnit> found;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    auto* unit = dynamic_cast<UnitBase*>(item.value().get());
    if (!unit) continue;
    for (const auto& outer : found)
      KINDLING_CHECK(item.key().rfind(outer.name + ".", 0) != 0, detail::kShardingWho, ": Unit '", item.key(), "' lies inside Unit '",
                     outer.name, "'; units cannot nest: keep the outer or the inner ones");
    found.push_back({item.key(), item.value(), unit});
  }
  if (!found.empty() || !children_are_units) return found;
  for (const auto& item : module.named_children()) found.push_back({item.key(), item.value(), nullptr});
  return found;
}

using ParamList = std::vector<std::pair<std::string, at::Tensor>>;

// The module's parameters that require a gradient, by unit (index 0: in no unit).
std::vector<ParamList> split_parameters(torch::nn::Module& module, const std::vector<FoundUnit>& found) {
  std::unordered_map<const void*, std::size_t> unit_of;
  for (std::size_t u = 0; u < found.size(); ++u)
    for (const auto& p : found[u].module->parameters()) unit_of.emplace(p.unsafeGetTensorImpl(), u + 1);
  std::vector<ParamList> split(found.size() + 1);
  std::unordered_map<const void*, std::string> seen;
  for (const auto& item : module.named_parameters()) {
    const at::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    auto twice = seen.emplace(p.unsafeGetTensorImpl(), item.key());
    KINDLING_CHECK(twice.second, detail::kShardingWho, ": one tensor is registered as '", twice.first->second, "' and as '",
                   item.key(), "' (tied weights); a sharded model needs each parameter once: untie them");
    auto it = unit_of.find(p.unsafeGetTensorImpl());
    split[it == unit_of.end() ? 0 : it->second].emplace_back(item.key(), p);
  }
  return split;
}

std::string signature(const std::vector<ParamList>& split, const std::vector<FoundUnit>& found) {
  std::ostringstream sig;
  for (std::size_t u = 0; u < split.size(); ++u) {
    sig << (u == 0 ? std::string("<root>") : found[u - 1].name) << '{';
    for (const auto& p : split[u]) sig << p.first << ':' << p.second.sizes() << ':' << p.second.scalar_type() << ';';
    sig << '}';
  }
  return sig.str();
}

}  // namespace

ShardedModel::State::State(torch::nn::Module& module, ShardingOptions o, bool children)
    : options(std::move(o)) {
  const auto& group = options.group();
  world = group.size();
  src = group.ranks().front();
  scale = at::scalar_tensor(1.0 / world, at::kDouble);
  scale.unsafeGetTensorImpl()->set_wrapped_number(true);
  const auto found = find_units(module, children);
  children_are_units = children && (found.empty() || found.front().unit == nullptr);
  const auto split = split_parameters(module, found);
  std::size_t count = 0;
  for (const auto& s : split) count += s.size();
  KINDLING_CHECK(count > 0, detail::kShardingWho, ": the module has no parameter that requires a gradient; there is nothing to shard");
  const auto flag = [](bool on) { return std::string(on ? "true" : "false"); };
  dist::require_same_settings(detail::kShardingWho,
                              {{"reshard_after_forward", flag(options.reshard_after_forward())},
                               {"prefetch", flag(options.prefetch())},
                               {"broadcast_buffers", flag(options.broadcast_buffers())},
                               {"param_dtype", options.param_dtype() ? c10::toString(*options.param_dtype()) : "unset"},
                               {"reduce_dtype", options.reduce_dtype() ? c10::toString(*options.reduce_dtype()) : "unset"},
                               {"units and parameters", signature(split, found)}},
                              group);
  for (const auto& b : module.named_buffers()) {
    buffers.push_back(b.value());
    buffer_names.push_back(b.key());
  }
  {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> detached;
    for (const auto& s : split)
      for (const auto& p : s) {
        // A module an earlier sharded model left (expanded NaN, kindling::nn::ShardedModel's
        // destructor) gets memory of its own to receive the broadcast into.
        if (!p.second.is_contiguous()) p.second.set_data(p.second.detach().contiguous());
        detached.push_back(p.second.detach());
      }
    detail::broadcast_coalesced(detached, src, group);
    detail::broadcast_coalesced(buffers, src, group);
  }
  // unit_at[k]: the state's unit of found unit k - 1 (k = 0: the root), npos without parameters.
  for (std::size_t k = 0; k < split.size(); ++k) {
    unit_at.push_back(split[k].empty() ? kNone : units.size());
    if (split[k].empty()) continue;
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    for (const auto& p : split[k]) {
      names.push_back(p.first);
      params.push_back(p.second);
    }
    units.emplace_back(k == 0 ? std::string() : found[k - 1].name, std::move(params), std::move(names), world,
                       group.rank(), options.param_dtype(), options.reduce_dtype());
  }
  for (std::size_t k = 1; k < split.size(); ++k)
    if (found[k - 1].unit) bound.emplace_back(found[k - 1].unit, unit_at[k]);
  std::unordered_map<const void*, std::pair<std::size_t, std::size_t>> place;
  for (std::size_t u = 0; u < units.size(); ++u)
    for (std::size_t i = 0; i < units[u].params().size(); ++i)
      place.emplace(units[u].params()[i].unsafeGetTensorImpl(), std::make_pair(u, i));
  for (const auto& item : module.named_parameters()) {
    auto it = place.find(item.value().unsafeGetTensorImpl());
    if (it != place.end()) order_of_params.push_back(it->second);
  }
}

void ShardedModel::State::attach(const ShardedModel* face) {
  std::weak_ptr<detail::UnitCalls> me = shared_from_this();
  for (const auto& b : bound) b.first->bind(me, b.second);
  for (std::size_t u = 0; u < units.size(); ++u) {
    units[u].remember_versions();
    for (std::size_t i = 0; i < units[u].params().size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(units[u].params()[i]);
      KINDLING_INTERNAL_ASSERT(acc != nullptr, "parameter ", units[u].names()[i], " has no gradient accumulator");
      std::weak_ptr<State> weak = shared_from_this();
      acc->add_post_hook(ready_hook(weak, u, i));
      accumulators.push_back(std::move(acc));
    }
  }
  // Under ZeRO-3 a rank keeps only its shards between steps, from the start. (After the
  // accumulators: each records its parameter's shape when made, and a freed one has none.)
  if (options.reshard_after_forward())
    for (auto& unit : units) unit.free();
  peak_gathered = gathered_numel();
  enroll(true, face);
}

ShardedModel::State::~State() {
  enroll(false);
  for (auto& unit : units) unit.leave_module();
  for (const auto& b : bound) b.first->bind({}, 0);
}

ShardedModel::ShardedModel(torch::nn::Module& module, ShardingOptions options, bool children_are_units)
    : state_(std::make_shared<State>(module, std::move(options), children_are_units)) {
  state_->attach(this);
}

// Out of the registry with its face (the state may outlive it a moment in a hook that holds it).
ShardedModel::~ShardedModel() { state_->enroll(false); }

const dist::Group& ShardedModel::group() const { return state_->options.group(); }

void ShardedModel::before_forward() { state_->before_forward(); }
void ShardedModel::after_forward() { state_->after_forward(); }
void ShardedModel::forward_failed() noexcept { state_->forward_failed(); }

void ShardedModel::enter_unit(std::size_t index) {
  if (!state_->children_are_units) return;
  const std::size_t u = state_->unit_at.at(index + 1);
  if (u != State::kNone) state_->enter(u);
}

void ShardedModel::leave_unit(std::size_t index, const std::vector<at::Tensor>& outputs) {
  if (!state_->children_are_units) return;
  const std::size_t u = state_->unit_at.at(index + 1);
  if (u != State::kNone) state_->leave(u, outputs);
}

std::vector<at::Tensor> ShardedModel::parameters() const {
  std::vector<at::Tensor> all;
  for (const auto& [u, i] : state_->order_of_params) all.push_back(state_->units[u].shards()[i]);
  return all;
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> all;
  for (const auto& [u, i] : state_->order_of_params)
    all.emplace_back(state_->units[u].names()[i], state_->units[u].shards()[i]);
  return all;
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::full_parameters() const {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> whole;
  for (const auto& unit : state_->units) {
    whole.push_back(at::empty({unit.full().numel()}, unit.shard().options()));
    dist::all_gather_into(whole.back(), unit.shard(), state_->options.group());
  }
  std::vector<std::pair<std::string, at::Tensor>> all;
  for (const auto& [u, i] : state_->order_of_params) {
    const auto& unit = state_->units[u];
    all.emplace_back(unit.names()[i], whole[u].narrow(0, unit.offset(i), unit.size(i)).view(unit.shape(i)).clone());
  }
  return all;
}

void ShardedModel::check_optimizer(const torch::optim::Optimizer& optimizer) const {
  std::unordered_map<const void*, std::string> originals;
  for (const auto& unit : state_->units)
    for (std::size_t i = 0; i < unit.params().size(); ++i)
      originals.emplace(unit.params()[i].unsafeGetTensorImpl(), unit.names()[i]);
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      auto it = originals.find(p.unsafeGetTensorImpl());
      KINDLING_CHECK(it == originals.end(), detail::kShardingWho, ": the optimizer holds the module's parameter '",
                     it->second, "' itself, which a sharded model never gives a gradient, so the optimizer would "
                     "step nothing: build it on model.parameters() (this rank's shards), not on "
                     "module()->parameters()");
    }
}

int64_t ShardedModel::peak_gathered_numel() const { return state_->peak_gathered; }

int64_t ShardedModel::peak_whole_gradient_numel() const { return state_->peak_whole_gradients; }

void ShardedModel::reset_peaks() {
  state_->peak_gathered = state_->gathered_numel();
  state_->peak_whole_gradients = 0;
}

std::vector<std::string> ShardedModel::units() const {
  std::vector<std::string> names;
  for (const auto& u : state_->units) names.push_back(u.name());
  return names;
}

int64_t ShardedModel::resident_parameter_numel() const {
  int64_t n = 0;
  for (const auto& u : state_->units) n += u.chunk() + (u.gathered() ? u.full().numel() : 0);
  return n;
}

void ShardedModel::set_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->sync = enabled;
}

bool ShardedModel::sync_enabled() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->sync;
}

ShardingNoSync::ShardingNoSync(ShardedModel* model) : model_(model) {
  if (!model_) return;
  previous_ = model_->sync_enabled();
  model_->set_sync(false);
}

ShardingNoSync::~ShardingNoSync() {
  if (model_) model_->set_sync(previous_);
}

}  // namespace nn
}  // namespace kindling
