// The optimizer inside a sharded model's backward (ShardedModel::step_in_backward): at the end of
// backward each unit's shards are stepped as soon as their reduction is in, while the later
// units' reductions are still on the wire, and under ZeRO-2 the unit's gather starts at once
// (sharding_backward.cpp's finish_backward calls step_unit).
#include <c10/util/Exception.h>

#include <unordered_set>
#include <utility>
#include <vector>

#include "kindling/error.h"
#include "nn/sharding/sharding_state.h"

namespace kindling {
namespace nn {

namespace {

// Takes the gradients of `optimizer`'s parameters that are not in `keep` out of them (returned
// with their parameters, for restore_hidden), so that a step changes only `keep`'s.
std::vector<std::pair<at::Tensor, at::Tensor>> hide_others(torch::optim::Optimizer& optimizer,
                                                           const std::unordered_set<const void*>& keep) {
  std::vector<std::pair<at::Tensor, at::Tensor>> hidden;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) {
      if (keep.count(p.unsafeGetTensorImpl()) || !p.grad().defined()) continue;
      hidden.emplace_back(p, p.grad());
      p.mutable_grad() = at::Tensor();
    }
  return hidden;
}

void restore_hidden(std::vector<std::pair<at::Tensor, at::Tensor>>& hidden) {
  for (auto& [p, grad] : hidden) p.mutable_grad() = std::move(grad);
}

}  // namespace

void ShardedModel::State::step_unit(std::size_t u) {
  const auto& shards = units[u].shards();
  std::unordered_set<const void*> mine;
  for (const auto& s : shards) mine.insert(s.unsafeGetTensorImpl());
  auto hidden = hide_others(*stepper, mine);
  try {
    stepper->step();
  } catch (...) {
    restore_hidden(hidden);
    throw;
  }
  restore_hidden(hidden);
  // Stepped: the optimizer's own step() after backward finds no gradient here and leaves them.
  for (const auto& s : shards) s.mutable_grad() = at::Tensor();
}

void ShardedModel::step_in_backward(torch::optim::Optimizer* optimizer) {
  if (optimizer) {
    check_optimizer(*optimizer);
    // A step with every gradient taken out changes nothing for an optimizer that needs no
    // closure; one that needs a closure (LBFGS) refuses it, and is refused here.
    auto hidden = hide_others(*optimizer, {});
    try {
      optimizer->step();
    } catch (const c10::Error& e) {
      restore_hidden(hidden);
      KINDLING_CHECK(false, detail::kShardingWho, "::step_in_backward: the optimizer cannot step without a closure (",
                     e.what_without_backtrace(), "); stepping inside backward needs one whose step() takes no "
                     "closure and updates each parameter from its own gradient and state (SGD, Adam, AdamW, RMSprop, "
                     "Adagrad): keep calling step() yourself for this one");
    }
    restore_hidden(hidden);
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->stepper = optimizer;
}

torch::optim::Optimizer* ShardedModel::stepping_in_backward() const { return state_->stepper; }

}  // namespace nn
}  // namespace kindling
