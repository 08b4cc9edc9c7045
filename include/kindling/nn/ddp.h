#pragma once
/// \file
/// kindling's DistributedDataParallel for LibTorch modules. auto_model / auto_optim (idist's
/// names), which build it, are in <kindling/dist/auto.h>. <kindling/kindling.h> includes
/// this header too, but it pulls in LibTorch's nn headers: include it alone to compile faster.
///
/// \code
///   auto model = kindling::dist::auto_model(Net());          // DDP when distributed
///   torch::optim::SGD optimizer(model->parameters(), 0.01);
///   for (auto& batch : loader) {
///     optimizer.zero_grad();
///     auto loss = torch::nll_loss(model.forward(batch.data), batch.target);
///     loss.backward();            // gradients are averaged over ranks when this returns
///     optimizer.step();
///   }
/// \endcode
///
/// How it works (like PyTorch's DDP): gradients are grouped into buckets (reverse
/// registration order, a small first bucket, then `bucket_cap_mb`); each parameter's `.grad()`
/// is its place in its bucket (DdpOptions::gradient_as_bucket_view; without it, a hook copies
/// the gradient in), and when a bucket is complete its all-reduce starts asynchronously while
/// backward goes on. At the end of backward (an autograd-engine callback) every bucket is
/// waited on, so `backward()` returns with averaged gradients in `.grad()`. Buckets are
/// launched in index order on every rank, so the all-reduces match even when gradients
/// become ready in a different order. After the first synchronised backward the buckets are
/// made again in the order the group's first rank saw the gradients become ready (as torch's
/// Reducer; not with find_unused_parameters alone, nor under a communication hook), so that
/// each bucket fills as early as backward allows.
///
/// Uneven inputs (ranks with different numbers of batches): kindling::nn::Join
/// (kindling/nn/join.h).
///
/// Communication: constructing a GradientReducer, a forward that broadcasts buffers and a
/// synchronised backward are collectives over DdpOptions::group(): every rank of the group
/// must do them, in the same order. They throw kindling::TimeoutError when a rank does not
/// take part within the timeout and kindling::CommunicationError when the engine fails
/// (backward() passes these on).

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/export.h"
#include "kindling/nn/comm_hook.h"
#include "kindling/options.h"

namespace kindling {
namespace nn {

/// Options of auto_model / DistributedDataParallel. Chain the setters. Setters and getters
/// do not check or throw; GradientReducer's constructor checks the values.
struct KINDLING_API DdpOptions {
  /// Bucket size in MiB (default 25, as PyTorch), positive. The first bucket is capped at
  /// 1 MiB so that communication starts early in backward.
  KINDLING_ARG(double, bucket_cap_mb) = 25.0;

  /// Allow parameters that get no gradient in an iteration (PyTorch's
  /// find_unused_parameters). Costs one extra small all-reduce per iteration. Without it,
  /// a parameter that gets no gradient is an error naming it (kindling::UsageError at the
  /// end of backward, on the rank that did not use it).
  KINDLING_ARG(bool, find_unused_parameters) = false;

  /// Broadcast buffers (BatchNorm statistics...) from the group's first rank (rank 0 for the
  /// world) before each forward that has gradients enabled and sync on (default true).
  KINDLING_ARG(bool, broadcast_buffers) = true;

  /// The group whose ranks train together (default: the world).
  KINDLING_ARG(dist::Group, group);

  /// idist's sync_bn: in a distributed run, switch every kindling::nn::BatchNorm2d of the
  /// model to batch statistics over the group (convert_sync_batchnorm, which also says
  /// why torch::nn::BatchNorm layers are refused). Default false.
  KINDLING_ARG(bool, sync_batchnorm) = false;

  /// What averages a complete bucket (kindling/nn/comm_hook.h: allreduce_hook,
  /// fp16_compress_hook, bf16_compress_hook, or your own). Default: none, one sum all-reduce
  /// per bucket divided by the group's size after it.
  KINDLING_ARG(std::shared_ptr<CommHook>, comm_hook);

  /// Without a comm_hook, on the world group: average with the hierarchical all-reduce
  /// (hierarchical_allreduce_hook) where it sends fewer bytes over the host links than the
  /// flat one, i.e. several hosts with several ranks on some (kindling/dist/hierarchy.h).
  /// Constructing the model then also makes the hierarchy's groups. false: always flat.
  /// Default true.
  KINDLING_ARG(bool, hierarchical_allreduce) = true;

  /// torch's gradient_as_bucket_view: each parameter's `.grad()` is its place in its bucket, so
  /// backward accumulates straight into the buffer that is reduced and the average is left
  /// there: no copy into the bucket, none back (the copies cost 2 x the model's bytes per step).
  /// The gradients then share their bucket's storage (`grad.is_alias_of` another's) while the
  /// model lives, and become copies of their own when it is destroyed. Zeroing gradients in
  /// place keeps them in the bucket; resetting them to none (LibTorch 2.x's default
  /// `Optimizer::zero_grad()`) makes autograd allocate new ones, which the next backward copies
  /// in once and puts back in the bucket: correct, but the copy-in stays. The training is bit
  /// for bit that of false. On the mpi backend a bucket may live in MPI's shared window, freed
  /// by finalize(): destroy the model first (as for any DDP state). Default true.
  KINDLING_ARG(bool, gradient_as_bucket_view) = true;

  /// torch's static_graph: the same parameters get gradients in every iteration. The first
  /// synchronised backward learns which ones do not (as find_unused_parameters, one extra small
  /// all-reduce, then never again); in later ones they are marked ready with zeros as backward
  /// starts, so their buckets need not wait for the end of backward. A backward whose graph
  /// differs (a parameter that gets a gradient it did not get in the first, or the reverse) is
  /// refused: kindling::UsageError out of backward() naming the parameter. Default false.
  KINDLING_ARG(bool, static_graph) = false;

  /// Bucket sizes (MiB, each positive) to try over the first synchronised steps, keeping the
  /// fastest (as Horovod tunes its fusion buffer). After the first synchronised backward each
  /// size is used for autotune_steps steps; a step's time is StepTimes' whole step (between
  /// steps, forward, backward, wait, write back); a size scores the median of its steps after
  /// the first (which remakes the buckets), the slowest rank's (one all-reduce per size). Then
  /// the best size stays. The buckets keep their order (the order of readiness where DDP rebuilt
  /// them). StepTimes::bucket_cap_mb says which size each step used; GradientReducer::
  /// bucket_autotune() gives the scores. Not with a comm_hook (a hook may keep state by bucket).
  /// Default: empty, bucket_cap_mb throughout.
  KINDLING_ARG(std::vector<double>, autotune_bucket_cap_mb);

  /// Steps per size in the autotune (at least 2; default 5).
  KINDLING_ARG(int64_t, autotune_steps) = 5;
};

/// The gradient synchronisation engine of DistributedDataParallel, for any list of
/// parameters. Constructing it broadcasts parameters and buffers from the group's first
/// rank and installs the hooks; destroying it removes them. Every rank of the group must
/// construct it with the same parameters (checked).
///
/// Each synchronised backward is a collective: every rank of the group must run it, in the
/// same order. It throws kindling::UsageError (out of backward()) for a parameter that got
/// no gradient without find_unused_parameters, or a sparse gradient; and
/// kindling::TimeoutError / kindling::CommunicationError from the all-reduces.
/// Where one synchronised training step's time went, as DDP sees it (seconds, steady clock):
/// how much of the communication backward hid, and what it did not.
struct KINDLING_API StepTimes {
  /// The synchronised backward these times describe (1 for the first); 0 before any.
  int64_t step = 0;
  /// From the end of the previous synchronised backward to this step's forward: the
  /// optimizer step, zero_grad, the next batch, handlers (0 for the first step).
  double between_steps = 0;
  /// DistributedDataParallel::forward (the buffers' broadcast included).
  double forward = 0;
  /// From the end of forward to the end of backward's computation: the loss, then autograd
  /// until the last gradient (the bucket reductions run meanwhile).
  double backward = 0;
  /// After backward's computation, waiting for the buckets' reductions (hooks included): the
  /// communication backward did not hide.
  double communication_wait = 0;
  /// After the waits: averaging and copying the results into each parameter's `.grad()`.
  double write_back = 0;
  /// The bucket size (MiB) this step's buckets were made with (DdpOptions::autotune_bucket_cap_mb).
  double bucket_cap_mb = 0;
};

/// One size the bucket autotune tried (DdpOptions::autotune_bucket_cap_mb).
struct KINDLING_API BucketTrial {
  double bucket_cap_mb = 0;
  /// The median step time (seconds) of its timed steps, the slowest rank's.
  double step_seconds = 0;
};

class KINDLING_API GradientReducer {
 public:
  /// Collective over options.group(): every rank of the group, in the same order. It
  /// all-gathers a signature of the parameters that require a gradient (names, shapes,
  /// dtypes), then broadcasts parameters and buffers. Throws kindling::UsageError for
  /// bucket_cap_mb <= 0 or no parameter that requires a gradient, and for an
  /// autotune_bucket_cap_mb with a size <= 0, with autotune_steps < 2 or with a comm_hook (all
  /// checked before any communication) and when the ranks' parameters differ; kindling::TimeoutError /
  /// kindling::CommunicationError from the collectives.
  GradientReducer(const torch::nn::Module& module, DdpOptions options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Called before each forward: broadcasts the buffers from the source rank when
  /// broadcast_buffers is on, gradients are enabled and sync is on (as torch's DDP; a
  /// no-grad or no_sync forward does not communicate). All ranks of the group call it
  /// together in that case, in the same order; it can then throw kindling::TimeoutError /
  /// kindling::CommunicationError. Otherwise local and nothing of its own to throw.
  void before_forward();
  /// While false (see no_sync()), backward accumulates gradients locally without
  /// communication; the next synchronised backward averages the accumulated gradients.
  /// Local (each rank sets its own); does not throw.
  void set_sync(bool enabled);
  /// Whether backward synchronises now. Local; does not throw.
  bool sync_enabled() const;
  /// Number of buckets, and the parameter names in each (for tests and tuning): reverse
  /// registration order until the first synchronised backward, the order of readiness after
  /// it (see the file's comment). Local.
  std::vector<std::vector<std::string>> buckets() const;
  /// Backward passes that ended with averaged gradients. Local; does not throw.
  int64_t synchronized_backwards() const;
  /// Seconds the last synchronised backward waited, after its last gradient, for its
  /// all-reduces to finish: the communication backward did not hide behind computation
  /// (0 before the first). For profiling (examples/cifar10 --profile). Local; does not throw.
  double last_sync_wait_seconds() const;
  /// The last synchronised step's breakdown (StepTimes); `step` is 0 before the first. A
  /// forward that does not communicate (no grad, no_sync) does not start a step. Local; does
  /// not throw.
  StepTimes last_step_times() const;
  /// The bucket size (MiB) in use now: bucket_cap_mb, or the autotune's current or chosen size.
  /// Local; does not throw.
  double bucket_cap_mb() const;
  /// The sizes the autotune has scored so far, in the order tried (empty without it). Local;
  /// does not throw.
  std::vector<BucketTrial> bucket_autotune() const;
  /// The name of the hook that averages the buckets ("none": one flat all-reduce each; else
  /// CommHook::name(), e.g. "hierarchical_allreduce" where DDP picked it). Local; does not throw.
  std::string comm_hook_name() const;
  /// Called by DistributedDataParallel::forward when the module's forward returns (or throws).
  /// Local; does not throw.
  void after_forward() noexcept;

  struct State;

 private:
  friend class Join;  // kindling/nn/join.h: puts the reducer in join mode
  std::shared_ptr<State> state_;
};

/// RAII: disables gradient synchronisation for its lifetime (gradient accumulation).
/// On destruction it restores the previous setting. Local; does not throw.
class KINDLING_API NoSyncGuard {
 public:
  /// A null `reducer` (the serial model) makes a guard that does nothing.
  explicit NoSyncGuard(GradientReducer* reducer);
  ~NoSyncGuard();
  NoSyncGuard(NoSyncGuard&& other) noexcept : reducer_(other.reducer_), previous_(other.previous_) {
    other.reducer_ = nullptr;
  }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  GradientReducer* reducer_;
  bool previous_ = true;
};

/// A module of type M with data-parallel gradient synchronisation. Use it like the module:
/// `ddp->parameters()`, `ddp.forward(x)` (or `ddp(x)`), `ddp->train()`. In the serial
/// model it holds no reducer and is a plain pass-through.
template <class M>
class DistributedDataParallel {
 public:
  /// Wraps `module` and `reducer` (null: no synchronisation). Local; does not throw. Build
  /// the reducer (a collective) with auto_model or GradientReducer's constructor.
  DistributedDataParallel(std::shared_ptr<M> module, std::shared_ptr<GradientReducer> reducer)
      : module_(std::move(module)), reducer_(std::move(reducer)) {}

  M* operator->() const { return module_.get(); }
  M& operator*() const { return *module_; }
  const std::shared_ptr<M>& module() const { return module_; }
  /// Null in the serial model.
  GradientReducer* reducer() const { return reducer_.get(); }

  /// reducer()->before_forward() (a collective over the group when it broadcasts buffers:
  /// every rank of the group, in the same order), then the module's forward. Throws what
  /// those throw; nothing of its own.
  template <class... Args>
  decltype(auto) forward(Args&&... args) {
    if (reducer_) reducer_->before_forward();
    // Tells the reducer when forward ends (for StepTimes), also for a forward that returns void.
    struct ForwardEnd {
      GradientReducer* reducer;
      ~ForwardEnd() {
        if (reducer) reducer->after_forward();
      }
    } end{reducer_.get()};
    return module_->forward(std::forward<Args>(args)...);
  }
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  /// Gradient accumulation: `{ auto guard = ddp.no_sync(); loss.backward(); }`. Local;
  /// does not throw.
  NoSyncGuard no_sync() { return NoSyncGuard(reducer_.get()); }

 private:
  std::shared_ptr<M> module_;
  std::shared_ptr<GradientReducer> reducer_;
};

}  // namespace nn

}  // namespace kindling
