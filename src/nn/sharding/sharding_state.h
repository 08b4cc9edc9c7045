#pragma once
// The state of a sharded model (kindling/nn/sharding.h): its units, and what each forward and
// backward does with them. Construction in sharding.cpp; forward (gathers, frees, prefetches) in
// sharding_forward.cpp; backward (the accumulators' hooks, the reductions, the end) in
// sharding_backward.cpp; the optimizer inside backward in sharding_step.cpp.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kindling/nn/sharding.h"
#include "kindling/nn/unit.h"
#include "nn/sharding/shard_unit.h"

namespace kindling {
namespace nn {
namespace detail {
// Who a sharded model's errors name.
constexpr const char* kShardingWho = "kindling::nn::FullyShardedDataParallel";
}  // namespace detail

struct ShardedModel::State : detail::UnitCalls, std::enable_shared_from_this<ShardedModel::State> {
  // --- Construction (sharding.cpp): the user's thread, collectives over the group.
  State(torch::nn::Module& module, ShardingOptions options, bool children_are_units);
  // Binds the Units and hooks the accumulators (needs shared_from_this()). Local.
  void attach(const ShardedModel* face);
  ~State() override;
  // Adds (or removes) the module's parameters and the shards to the registry detail::sharded_role
  // reads (sharding_state_dict.cpp). Local.
  void enroll(bool add, const ShardedModel* face = nullptr);
  // (unit, parameter) of each of `optimizer`'s parameters, in its order (torch's indices).
  // Throws kindling::UsageError for one that is not a shard of this model. Local.
  std::vector<std::pair<std::size_t, std::size_t>> places_of(const torch::optim::Optimizer& optimizer) const;

  // --- Forward (sharding_forward.cpp): the user's thread, collectives over the group.
  void before_forward();
  // Starts the gathers a forward needs first: the root unit's, and under ZeRO-2 every stale unit's
  // in the order the last forward entered them.
  void start_forward_gathers();
  // Broadcasts the buffers from the group's first rank (when the options say so).
  void broadcast_buffers();
  // After a forward that returned: waits the gathers it started for units it did not enter.
  void after_forward();
  // After a forward that threw. Local.
  void forward_failed() noexcept;
  void enter(std::size_t index) override;
  void leave(std::size_t index, const std::vector<at::Tensor>& outputs) override;
  // Whether unit u's buffer misses its shards' latest values (freed, or stepped since).
  bool stale(std::size_t u) const;
  // Starts unit u's gather (gives its buffer memory first) unless it is gathered or in flight.
  void start_gather(std::size_t u);
  // Elements of the units' whole buffers that hold memory now.
  int64_t gathered_numel() const;
  // Ends unit u's gather (starting it first when needed): its parameters are whole views after.
  void finish_gather(std::size_t u);
  // The unit the last forward entered after `u` (next = true) or before it; npos when none.
  std::size_t neighbour(std::size_t u, bool next) const;

  // --- Backward (sharding_backward.cpp): autograd's thread.
  // Queues finish_backward() at the end of this backward, once.
  void queue_finish();
  // Unit u's outputs got their gradient: under ZeRO-3 gather it back, prefetch the one before.
  void unit_backward(std::size_t u);
  // Parameter `i` of unit `u` accumulated its gradient.
  void mark_ready(std::size_t u, std::size_t i);
  // At the end of backward: every reduction waited on, the shards' gradients added.
  void finish_backward();
  // The "parameter(s) got no gradient" refusal; ends what was started first.
  void refuse_missing();
  // Waits unit u's reduction, adds its share to the shards' gradients, frees its whole
  // gradients, steps it when stepping inside backward. Throws what the wait and the step throw.
  void settle(std::size_t u);
  // Waits every reduction still in flight and forgets this backward (before an error leaves).
  void abandon_iteration() noexcept;

  // --- The optimizer inside backward (sharding_step.cpp): autograd's thread, at the end.
  // Steps unit u's shards with `stepper` (their gradients only; every other parameter's is kept
  // out of the step), then drops those gradients. Local; throws what the optimizer throws.
  void step_unit(std::size_t u);

  // The accumulator's hook of parameter i of unit u: calls mark_ready(u, i).
  static std::unique_ptr<torch::autograd::FunctionPostHook> ready_hook(std::weak_ptr<State> state, std::size_t u,
                                                                       std::size_t i);

  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  ShardingOptions options;
  int world = 1;
  int src = 0;
  std::vector<detail::ShardUnit> units;  // the units with parameters (the root first, if it has any)
  // unit_at[k]: the unit of the module's k-th unit (k = 0: the root; kNone: no parameters).
  std::vector<std::size_t> unit_at;
  bool children_are_units = false;
  std::vector<std::pair<UnitBase*, std::size_t>> bound;  // the Units and their unit
  // The module's parameters in its order: (unit, index in the unit).
  std::vector<std::pair<std::size_t, std::size_t>> order_of_params;
  std::vector<at::Tensor> buffers;
  std::vector<std::string> buffer_names;  // theirs in the module
  // The gradient accumulators (a shared_ptr on LibTorch 1.13, an intrusive_ptr on 2.x), kept so
  // that their hooks stay.
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> accumulators;
  at::Tensor scale;  // 1 / world, a wrapped double (DDP's)

  // The order the last forward entered its units (prefetch's guide), and this forward's.
  std::vector<std::size_t> order, entering;
  std::vector<std::size_t> reduce_order;  // the units whose reductions are in flight, in the order started
  torch::optim::Optimizer* stepper = nullptr;  // ShardedModel::step_in_backward's (not owned)
  std::mutex mu;  // backward's hooks against each other
  bool sync = true;
  bool callback_queued = false;
  // Stepping inside backward broadcast the buffers at its end, ahead of the gathers it started:
  // the next forward with gradients does not again.
  bool buffers_sent = false;
  int64_t peak_gathered = 0;  // the most gathered_numel() has been
  int64_t peak_whole_gradients = 0;  // the most elements of the units' whole gradients alive at once
};

}  // namespace nn
}  // namespace kindling
