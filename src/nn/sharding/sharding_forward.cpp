// A sharded model's forward (kindling/nn/sharding.h): the gathers before each unit (the next
// one's already in flight), the frees after it under ZeRO-3, and the hooks that gather a unit
// back when backward reaches its outputs.
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>

#include "kindling/error.h"
#include "nn/broadcast_coalesced.h"
#include "nn/sharding/sharding_state.h"

namespace kindling {
namespace nn {

bool ShardedModel::State::stale(std::size_t u) const {
  // LibTorch's optimizers change some parameters through .data(), which keeps the version: a
  // synchronised backward (after which the optimizer may step) marks every unit stale.
  const auto& unit = units[u];
  return !unit.gathered() || unit.stepped_since_gather || unit.shard_version() != unit.gathered_version;
}

void ShardedModel::State::start_gather(std::size_t u) {
  auto& unit = units[u];
  if (unit.gather_work.valid() || !stale(u)) return;
  unit.allocate();
  peak_gathered = std::max(peak_gathered, gathered_numel());
  unit.gathering_version = unit.shard_version();
  unit.gather_work = dist::all_gather_into_async(unit.full(), unit.gather_input(), options.group());
}

int64_t ShardedModel::State::gathered_numel() const {
  int64_t n = 0;
  for (const auto& unit : units)
    if (unit.allocated()) n += unit.full().numel();
  return n;
}

void ShardedModel::State::finish_gather(std::size_t u) {
  auto& unit = units[u];
  start_gather(u);
  if (!unit.gather_work.valid()) return;
  unit.gather_work.wait();
  unit.gather_work = dist::Work();
  unit.show();
  unit.gathered_version = unit.gathering_version;  // a change while in flight: stale again
  unit.stepped_since_gather = false;
  unit.remember_versions();
}

std::size_t ShardedModel::State::neighbour(std::size_t u, bool next) const {
  auto it = std::find(order.begin(), order.end(), u);
  if (it == order.end()) return kNone;
  if (next) return it + 1 == order.end() ? kNone : *(it + 1);
  return it == order.begin() ? kNone : *(it - 1);
}

void ShardedModel::State::before_forward() {
  for (const auto& unit : units) {
    const int i = unit.changed_param();
    KINDLING_CHECK(i < 0, detail::kShardingWho, ": parameter '", unit.names()[i], "' was changed in place outside the sharded model "
                   "since its last forward (its version went from ", unit.param_versions[i], " to ",
                   unit.params()[i]._version(), "); the next gather would overwrite the change. Build the optimizer on "
                   "model.parameters() (this rank's shards), not on the module's parameters, and change weights "
                   "through the shards");
  }
  if (torch::autograd::GradMode::is_enabled()) {
    if (!buffers_sent) broadcast_buffers();
    buffers_sent = false;
  }
  entering.clear();
  start_forward_gathers();
  const std::size_t root = unit_at.front();
  if (root != kNone) finish_gather(root);
}

void ShardedModel::State::broadcast_buffers() {
  if (!options.broadcast_buffers() || buffers.empty()) return;
  at::NoGradGuard no_grad;
  detail::broadcast_coalesced(buffers, src, options.group());
}

void ShardedModel::State::start_forward_gathers() {
  const std::size_t root = unit_at.front();
  if (root != kNone) start_gather(root);
  if (options.reshard_after_forward()) return;
  // ZeRO-2 keeps the units whole: those the optimizer stepped are gathered now, all at once, in
  // the order the last forward entered them (then any other).
  for (std::size_t u : order) start_gather(u);
  for (std::size_t u = 0; u < units.size(); ++u) start_gather(u);
}

void ShardedModel::State::enter(std::size_t u) {
  if (u == kNone) return;
  entering.push_back(u);
  start_gather(u);
  if (options.prefetch()) {
    const std::size_t next = neighbour(u, /*next=*/true);
    if (next != kNone) start_gather(next);
  }
  finish_gather(u);
}

void ShardedModel::State::leave(std::size_t u, const std::vector<at::Tensor>& outputs) {
  if (u == kNone || !options.reshard_after_forward()) return;
  std::weak_ptr<State> weak = shared_from_this();
  bool hooked_any = false;
  for (const auto& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    // Backward reaches the unit through its outputs: gather it back before its first node runs.
    at::Tensor hooked = out;
    hooked.register_hook([weak, u](const at::Tensor&) {
      if (auto s = weak.lock()) s->unit_backward(u);
    });
    hooked_any = true;
  }
  // The unit the last forward entered last is the one backward needs first: kept gathered
  // (as torch's fully_shard keeps its root) rather than freed and gathered again at once.
  if (hooked_any && !order.empty() && order.back() == u && entering.size() == order.size()) return;
  units[u].free();
}

void ShardedModel::State::after_forward() {
  if (!entering.empty()) order = entering;
  // A prefetched unit this forward did not reach: its gather ends here, nothing else may wait.
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (!units[u].gather_work.valid()) continue;
    finish_gather(u);
    if (options.reshard_after_forward() && u != unit_at.front()) units[u].free();
  }
}

void ShardedModel::State::forward_failed() noexcept { entering.clear(); }

at::Tensor ShardedModel::cast_input(const at::Tensor& input) const {
  const auto& dtype = state_->options.param_dtype();
  if (!dtype || !input.defined() || !input.is_floating_point()) return input;
  return input.to(*dtype);
}

at::Tensor ShardedModel::cast_output(const at::Tensor& output) const {
  if (!state_->options.param_dtype() || !output.defined() || !output.is_floating_point()) return output;
  return output.to(state_->units.front().shard().scalar_type());
}

}  // namespace nn
}  // namespace kindling
