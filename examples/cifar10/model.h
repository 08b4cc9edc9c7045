#pragma once
// The tutorial's model: a kindling ResNet under DDP (with --comm_hook's hook, or DiLoCo's with
// --diloco_every), or sharded (--sharding zero2|zero3), and what its checkpoints and engines need
// from either.
#include <kindling/handlers/checkpointing/stateful.h>
#include <kindling/models/resnet.h>
#include <kindling/nn/comm_hook.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/diloco.h>
#include <kindling/nn/sharding.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <vector>

#include "config.h"

namespace cifar10 {

class TrainedModel {
 public:
  using Ddp = kindling::nn::DistributedDataParallel<kindling::models::ResNetImpl>;
  using Sharded = kindling::nn::FullyShardedDataParallel<kindling::models::ResNetImpl>;

  /// Builds --model for `channels` input channels, under DDP or sharded as --sharding says (a
  /// collective: every rank; with --diloco_every the DDP model waits for stepped_by()). Returns
  /// the parameters the optimizer steps.
  std::vector<at::Tensor> make(const Config& config, int64_t channels);
  /// The optimizer the trainer steps: `inner`, or with --diloco_every a DiLoCo over it, and then
  /// the DDP model with DiLoCo's hook. Every rank calls it once, after make() (a collective).
  torch::optim::Optimizer& stepped_by(torch::optim::Optimizer& inner, const Config& config);
  /// `f(model)` with the DDP or the sharded model (create_supervised_trainer / evaluator).
  template <class F>
  decltype(auto) visit(F&& f) {
    return sharded_ ? f(*sharded_) : f(*ddp_);
  }
  /// The model for a checkpoint (a sharded one saved whole), and its optimizer's state.
  std::shared_ptr<kindling::handlers::Stateful> state() const;
  std::shared_ptr<kindling::handlers::Stateful> optimizer_state(torch::optim::Optimizer& optimizer) const;
  /// --comm_hook's hook (null for none or sharded), whose state is checkpointed too.
  const std::shared_ptr<kindling::nn::CommHook>& comm_hook() const { return hook_; }
  /// --diloco_every's optimizer (null without it).
  kindling::nn::DiLoCo* diloco() const { return diloco_.get(); }
  /// DDP's reducer (--profile); null when sharded or serial.
  const kindling::nn::GradientReducer* reducer() const { return ddp_ ? ddp_->reducer() : nullptr; }

 private:
  std::shared_ptr<kindling::nn::CommHook> hook_;
  kindling::models::ResNet net_{nullptr};           // until stepped_by() wraps it (--diloco_every)
  std::unique_ptr<kindling::nn::DiLoCo> diloco_;  // --diloco_every
  std::optional<Ddp> ddp_;
  std::optional<Sharded> sharded_;
};

}  // namespace cifar10
