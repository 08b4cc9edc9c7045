#pragma once
/// \file
/// The optimizer inside backward (torch's _apply_optimizer_in_backward with DDP): each DDP
/// bucket's parameters are stepped as soon as that bucket's average is in, at the end of
/// backward, while the later buckets' reductions are still on the wire, instead of after all of
/// them.
///
/// \code
///   auto net = Net();
///   kindling::nn::OptimizerInBackward optimizer(net->parameters(), torch::optim::AdamOptions(1e-3));
///   auto model = kindling::dist::auto_model(net, kindling::nn::DdpOptions().comm_hook(optimizer.comm_hook()));
///   // zero_grad(), forward, backward (which steps), optimizer.step() (steps what backward did not)
/// \endcode
///
/// How it works: the comm hook averages each bucket (one sum all-reduce divided by the group's
/// size, or the hook it wraps), and when DDP waits for the bucket at the end of backward it puts
/// the average into the parameters' `.grad()` and runs an inner LibTorch optimizer (SGD, Adam or
/// AdamW) over that bucket's parameters. step() then steps only the parameters backward did not
/// (none under DDP; all of them in the serial model, where no hook runs), so training code and
/// create_supervised_trainer work unchanged, and LR schedulers change the options that the next
/// backward's steps use. The arithmetic of each element is the ordinary optimizer's: training
/// equals plain DDP with the ordinary step (bit for bit on 2 ranks).
///
/// Rules: whatever changes gradients between backward and step() comes too late: gradient
/// clipping by norm and GradScaler's unscaling are not possible (GradScaler refuses this
/// optimizer with kindling::UsageError); accumulate with no_sync as usual (the synchronised
/// backward steps).

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/nn/comm_hook.h"
#include "kindling/nn/optimizer_state.h"

namespace kindling {
namespace nn {

/// The optimizer of the file comment. Its param_groups() are the full parameter groups (LR
/// schedulers see it as the ordinary optimizer); its state() stays empty, the state lives in the
/// inner optimizers (state_dict() gives it whole).
class KINDLING_API OptimizerInBackward : public torch::optim::Optimizer, public SelfStatedOptimizer {
 public:
  /// `defaults` chooses the kind: torch::optim::SGDOptions, AdamOptions or AdamWOptions (every
  /// group's options of that kind). Local. Throws kindling::UsageError for another kind (named),
  /// a group of another kind than `defaults`, or no parameter.
  OptimizerInBackward(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                      const torch::optim::OptimizerOptions& defaults);
  /// One group of `params` with `defaults`.
  OptimizerInBackward(std::vector<at::Tensor> params, const torch::optim::OptimizerOptions& defaults);
  ~OptimizerInBackward() override;

  /// The comm hook to give the DDP model (DdpOptions::comm_hook): it averages each bucket with
  /// `reduce` (default null: one sum all-reduce divided by the group's size; or a hook such as
  /// fp16_compress_hook()), then steps the bucket's parameters when DDP waits for it. Every call
  /// makes a hook over this optimizer; give one DDP model one of them. Local; does not throw.
  std::shared_ptr<CommHook> comm_hook(std::shared_ptr<CommHook> reduce = nullptr);

  /// Runs the closure (if any, its loss returned), then steps the parameters that the last
  /// backward did not step, and forgets which ones it did. Local; throws what the inner
  /// optimizer throws.
  at::Tensor step(LossClosure closure = nullptr) override;

  /// The whole state in torch's optimizer.state_dict() layout (kindling/nn/optimizer_state.h),
  /// each parameter's from the inner optimizer that steps it. Local (every rank holds the whole).
  StateDict state_dict() const override;
  /// Restores a state_dict() (or an ordinary optimizer's optimizer_state_dict): the options at
  /// once, each parameter's state when its inner optimizer is made (at the first backward for a
  /// bucket's). Local. Throws kindling::UsageError naming what does not fit, before changing
  /// anything.
  void load_state_dict(const StateDict& state) override;

  /// Parameters stepped inside backward since the last step(). Local; does not throw.
  int64_t stepped_in_backward() const;

  /// LibTorch's archives: both throw kindling::UsageError pointing to state_dict() /
  /// load_state_dict() (kindling::handlers::stateful uses those).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace nn
}  // namespace kindling
