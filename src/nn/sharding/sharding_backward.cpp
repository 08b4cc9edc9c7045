// A sharded model's backward (kindling/nn/sharding.h): a unit gathered back when backward reaches
// its outputs (ZeRO-3), its gradients reduce-scattered as soon as the last one accumulated, the
// reduction before it waited on then and each rank's share of the average added to its shards'
// gradients (and stepped, when the optimizer steps inside backward), the last one at the end.
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>

#include <sstream>

#include "kindling/error.h"
#include "nn/sharding/sharding_state.h"

namespace kindling {
namespace nn {

namespace {

class ShardReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ShardReadyHook(std::weak_ptr<ShardedModel::State> state, std::size_t u, std::size_t i)
      : state_(std::move(state)), u_(u), i_(i) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto s = state_.lock()) s->mark_ready(u_, i_);
    return outputs;
  }

 private:
  std::weak_ptr<ShardedModel::State> state_;
  std::size_t u_, i_;
};

}  // namespace

std::unique_ptr<torch::autograd::FunctionPostHook> ShardedModel::State::ready_hook(std::weak_ptr<State> state,
                                                                                   std::size_t u, std::size_t i) {
  return std::make_unique<ShardReadyHook>(std::move(state), u, i);
}

void ShardedModel::State::queue_finish() {
  if (callback_queued) return;
  std::weak_ptr<State> weak = shared_from_this();
  torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto s = weak.lock()) s->finish_backward();
  });
  callback_queued = true;
}

void ShardedModel::State::unit_backward(std::size_t u) {
  std::lock_guard<std::mutex> lock(mu);
  if (units[u].backward_entered) return;
  units[u].backward_entered = true;
  queue_finish();
  start_gather(u);
  if (options.prefetch()) {
    const std::size_t before = neighbour(u, /*next=*/false);
    if (before != kNone) start_gather(before);
  }
  finish_gather(u);
}

void ShardedModel::State::mark_ready(std::size_t u, std::size_t i) {
  std::lock_guard<std::mutex> lock(mu);
  queue_finish();
  if (!sync) return;  // the gradients stay in .grad() and add up there until a synchronised backward
  auto& unit = units[u];
  // Autograd adds a parameter's gradients before it accumulates them once per backward; a second
  // accumulation means a backward inside this one (a reentrant one), whose reduction would be
  // launched twice.
  KINDLING_CHECK(!unit.ready[i], detail::kShardingWho, ": parameter '", unit.names()[i], "' of unit '", unit.name(),
                 "' accumulated a gradient twice in one backward (a backward run inside another, as activation "
                 "checkpointing's reentrant one does); the sharded model needs one accumulation per parameter per "
                 "backward: use a non-reentrant checkpoint, or none");
  unit.ready[i] = true;
  unit.take_gradient(i, scale);
  int64_t whole = 0;
  for (const auto& v : units) whole += v.grad_full.defined() ? v.grad_full.numel() : 0;
  peak_whole_gradients = std::max(peak_whole_gradients, whole);
  if (++unit.ready_count < unit.params().size()) return;
  unit.grad_shard = at::empty({unit.chunk()}, unit.grad_full.options());
  unit.reduce_work = dist::reduce_scatter_async(unit.grad_shard, unit.grad_full, dist::ReduceOp::kSum, options.group());
  reduce_order.push_back(u);
  if (options.reshard_after_forward() && u != unit_at.front()) unit.free();
  // The reductions that are in are settled now (their whole gradients freed). ZeRO-3 keeps one in
  // flight while backward computes the next unit: the one before it (queued ahead of it on the
  // wire) is waited on now, so that at most two units' whole gradients live. ZeRO-2, which keeps
  // whole parameters anyway, does not wait (where the wire is slower than backward, waiting there
  // cost it 7% on 2 hosts at 1 Gbit/s: docs/performance.md).
  try {
    while (!reduce_order.empty() && ((reduce_order.size() > 1 && options.reshard_after_forward()) ||
                                     units[reduce_order.front()].reduce_work.is_completed())) {
      settle(reduce_order.front());
      reduce_order.erase(reduce_order.begin());
    }
  } catch (...) {
    abandon_iteration();
    throw;
  }
}

void ShardedModel::State::settle(std::size_t u) {
  auto& unit = units[u];
  unit.reduce_work.wait();
  unit.reduce_work = dist::Work();
  unit.grad_full = at::Tensor();
  unit.add_to_shard_grads();
  unit.stepped_since_gather = true;
  if (stepper) step_unit(u);
}

void ShardedModel::State::refuse_missing() {
  std::ostringstream list;
  std::size_t missing = 0;
  for (const auto& unit : units)
    for (std::size_t i = 0; i < unit.params().size(); ++i)
      if (!unit.ready[i] && missing++ < 10) list << (missing > 1 ? ", " : "") << unit.names()[i];
  if (missing > 10) list << ", ... (" << missing << " in all)";
  abandon_iteration();
  KINDLING_CHECK(false, detail::kShardingWho, ": ", missing, " parameter(s) got no gradient in this backward: ", list.str(),
                 ". Every parameter must take part in the loss on every rank (the sharded model has no "
                 "find_unused_parameters)");
}

void ShardedModel::State::abandon_iteration() noexcept {
  // Finish what was started so that this rank's engine is left in a clean state.
  for (auto& unit : units) {
    try {
      if (unit.reduce_work.valid()) unit.reduce_work.wait();
    } catch (...) {  // the error on its way out is the one to report
    }
    unit.reduce_work = dist::Work();
    unit.reset_iteration();
  }
  reduce_order.clear();
  callback_queued = false;  // an error out of backward drops the callback it queued
}

void ShardedModel::State::finish_backward() {
  std::lock_guard<std::mutex> lock(mu);
  callback_queued = false;
  bool complete = true;
  for (const auto& unit : units) complete = complete && unit.ready_count == unit.params().size();
  if (sync && !complete) refuse_missing();
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].gather_work.valid()) finish_gather(u);  // a prefetch backward did not need
    if (options.reshard_after_forward()) units[u].free();
  }
  try {
    for (std::size_t u : reduce_order) settle(u);  // the last one still in flight
  } catch (...) {
    abandon_iteration();
    throw;
  }
  // Stepped inside backward: the next forward's gathers start now, in its order, so that it
  // computes while the later ones arrive (ZeRO-2: every unit; ZeRO-3: the root unit only), and
  // the buffers (which forward changed last) go before them rather than behind.
  if (stepper && sync) {
    broadcast_buffers();
    buffers_sent = true;
    start_forward_gathers();
  }
  reduce_order.clear();
  for (auto& unit : units) unit.reset_iteration();
}

}  // namespace nn
}  // namespace kindling
