#pragma once
/// \file
/// ZeRO stage 1 for kindling's DDP: each rank of the DDP group keeps and steps 1/N of the
/// optimizer's state (torch's ZeroRedundancyOptimizer; DeepSpeed's stage 1).
///
/// \code
///   auto net = Net();
///   kindling::nn::ZeroRedundancyOptimizer optimizer(net->parameters(), torch::optim::AdamOptions(1e-3));
///   auto model = kindling::dist::auto_model(net, kindling::nn::DdpOptions().comm_hook(optimizer.comm_hook()));
///   // then as with any optimizer: zero_grad(), forward, backward, optimizer.step()
/// \endcode
///
/// How it works: every DDP bucket is cut into N equal chunks, chunk r belonging to group rank r.
/// The optimizer's comm hook reduces each bucket as backward completes it, but instead of one
/// all-reduce it starts kindling::dist::reduce_scatter_async (while backward goes on; on gloo
/// and mpi each rank sends every other rank that rank's chunk and sums the N copies of its own):
/// only the rank's own chunk of `.grad()` holds the group's average afterwards, the rest keeps
/// this rank's values. step() runs the optimizer (SGD, Adam or AdamW) on the parameters' parts in
/// its chunks only, as views of the parameters, then all-gathers every bucket's updated chunks
/// (kindling::dist::all_gather_into_async, all buckets in flight at once). Both are collectives
/// of kindling::dist: watched by the stall monitor, fingerprinted, in the flight record.
/// The bytes sent equal one all-reduce's; the optimizer's state on each
/// rank is 1/N of the whole (rounded up to a chunk's size). The arithmetic of each element is
/// the ordinary optimizer's, so the training equals plain DDP's (bit for bit on 2 ranks; on
/// more, the sum of the N gradients runs in rank order, not the all-reduce's order).
///
/// With ZeroOptions().overlap_with_ddp(true) the step moves into backward: a thread of the hook's
/// own waits for each bucket's reduce-scatter as soon as it is posted, then steps that bucket's
/// chunk, while backward and the later buckets' reductions go on; DDP's wait for a bucket at the
/// end of backward waits for that thread, then starts the bucket's all-gather (on DDP's thread,
/// where every rank starts its collectives in one order); step() then only steps what backward
/// did not (the first iteration's buckets, whose layout is learnt then, and parameters in no
/// bucket) and receives the others' chunks.
///
/// Rules: the DDP model must use this optimizer's comm_hook() (kindling::UsageError from step()
/// otherwise) and keep its bucket layout (DDP does not rebuild buckets under a comm hook). Read
/// `.grad()` between backward and step() only for this rank's chunks (GradScaler and
/// clip_grad_norm_ need the group's view: the former is handled, see GradScaler; the latter is
/// not; with overlap_with_ddp GradScaler is refused, the step having run before it could check).
/// With overlap_with_ddp every synchronised backward steps (as kindling::nn::OptimizerInBackward
/// does) and must be followed by step() before the next one (kindling::UsageError otherwise), the
/// parameters are partly updated between backward and step() and are stepped while backward
/// still runs (a second backward through the same graph, retain_graph, is refused with
/// kindling::UsageError as soon as it reaches a parameter the first one stepped), and
/// kindling::nn::Join is refused. In the serial model, or a world of one rank, the optimizer is the ordinary one.

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/nn/comm_hook.h"
#include "kindling/nn/optimizer_state.h"

namespace kindling {
namespace nn {

/// ZeroRedundancyOptimizer's own options (the optimizer's are its `defaults`).
class KINDLING_API ZeroOptions {
 public:
  /// Step each bucket's chunk inside backward and overlap the all-gather with the later buckets'
  /// waits and steps (torch's ZeroRedundancyOptimizer(overlap_with_ddp=True)); see the file
  /// comment for what it changes. Default false: the step and the all-gather run in step(), after
  /// the whole backward, and GradScaler works. Turn it on where the link is the limit (across
  /// hosts at 1 Gbit/s it is what brings ZeRO level with plain DDP, docs/performance.md).
  ZeroOptions& overlap_with_ddp(bool on) {
    overlap_with_ddp_ = on;
    return *this;
  }
  bool overlap_with_ddp() const { return overlap_with_ddp_; }

 private:
  bool overlap_with_ddp_ = false;
};

/// The optimizer of the file comment. Its param_groups() are the full parameter groups (LR
/// schedulers and checkpoints see it as the ordinary optimizer); its state() stays empty, the
/// state lives in an inner LibTorch optimizer over this rank's parts.
class KINDLING_API ZeroRedundancyOptimizer : public torch::optim::Optimizer, public SelfStatedOptimizer {
 public:
  /// `defaults` chooses the kind: torch::optim::SGDOptions, AdamOptions or AdamWOptions (every
  /// group's options must be of that kind). Local, no communication. Throws kindling::UsageError
  /// for another kind (named), for a parameter group whose options are another kind than
  /// `defaults`, or for no parameter at all.
  ZeroRedundancyOptimizer(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                          const torch::optim::OptimizerOptions& defaults, ZeroOptions options = ZeroOptions());
  /// One group of `params` with `defaults`.
  ZeroRedundancyOptimizer(std::vector<at::Tensor> params, const torch::optim::OptimizerOptions& defaults,
                          ZeroOptions options = ZeroOptions());
  ~ZeroRedundancyOptimizer() override;

  /// The comm hook to give the DDP model (DdpOptions::comm_hook): it reduce-scatters each
  /// bucket and tells the optimizer the buckets' layout. One per optimizer (the same object on
  /// every call). Local; does not throw.
  std::shared_ptr<CommHook> comm_hook() const;

  /// Steps this rank's parts (those backward did not, with overlap_with_ddp), then all-gathers
  /// every bucket's parameters: a collective over the DDP group (every rank, in the same order).
  /// The closure, when given, is called first and its loss returned. Throws
  /// kindling::UsageError when the hook has reduced no bucket while the world has several ranks
  /// (the DDP model was built without comm_hook()), or when the parameter groups changed since
  /// the first step; kindling::TimeoutError / kindling::CommunicationError from the exchanges.
  at::Tensor step(LossClosure closure = nullptr) override;

  /// The whole state in torch's optimizer.state_dict() layout (kindling/nn/optimizer_state.h),
  /// consolidated from every rank's parts: a collective over the DDP group (every rank calls it,
  /// every rank gets the whole). Loadable by Python torch's optimizer of the same kind, by
  /// load_state_dict at any world size, and by the ordinary LibTorch optimizer through
  /// kindling::nn::load_optimizer_state_dict. Throws what the all_gather throws.
  StateDict state_dict() const override;
  /// Restores a state_dict() (or an ordinary optimizer's optimizer_state_dict) saved at any
  /// world size: the options at once, each rank's parts of the per-parameter state when the
  /// layout is known (at once after a first step, else at the first step). Local. Throws
  /// kindling::UsageError naming what does not fit (groups, parameter counts, shapes), before
  /// changing anything.
  void load_state_dict(const StateDict& state) override;

  /// Elements of per-parameter state this rank holds (tensors only), for tests and memory
  /// figures. Local; does not throw.
  int64_t local_state_numel() const;
  /// This rank's parts of the parameters' gradients (views of `.grad()`), the ones that hold
  /// the group's average after a synchronised backward; for GradScaler's overflow check. Local;
  /// throws kindling::UsageError as step() does when the layout is unknown.
  std::vector<at::Tensor> local_gradients();
  /// The options it was made with. Local; does not throw.
  const ZeroOptions& zero_options() const;
  /// The DDP group the hook reduced over (the world before the first synchronised backward).
  /// Local; does not throw.
  dist::Group group() const;

  /// LibTorch's archives cannot hold a sharded state: both throw kindling::UsageError pointing
  /// to state_dict() / load_state_dict() (kindling::handlers::stateful uses those).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace nn
}  // namespace kindling
