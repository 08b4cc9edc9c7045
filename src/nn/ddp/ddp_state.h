#pragma once
// GradientReducer::State (include/kindling/nn/ddp.h's pimpl): one DDP model's reducer. It marks
// each gradient ready as autograd accumulates it, launches the buckets' reductions in index
// order, and at the end of backward waits for them and puts the averages into .grad().
//
// Its state is private, each feature's in the part that owns it:
//   buckets_  the buckets and one backward's progress through them (detail::BucketSet,
//             src/nn/ddp_bucket_set.{h,cpp});
//   rebuild_  what the first backward learns: the order of readiness, static_graph's graph
//             (detail::Rebuild, src/nn/ddp/ddp_rebuild_state.h; used by src/nn/ddp/ddp_rebuild.cpp);
//   autotune_ the bucket-size autotune (detail::Autotune, src/nn/ddp_autotune.{h,cpp});
//   timer_    StepTimes (detail::StepTimer, src/nn/ddp/ddp_step_timer.h);
//   join_     a live Join (detail::JoinState, src/nn/ddp/ddp_join_state.h; src/nn/ddp/ddp_join.cpp).
// Defined in src/nn/ddp/ddp.cpp (construction, the API's reads), src/nn/ddp/ddp_state.cpp (one
// backward), src/nn/ddp/ddp_rebuild.cpp and src/nn/ddp_join.cpp.
//
// Threads: the user's thread constructs it and calls the forward, API and Join methods; autograd's
// threads call mark_ready() and finish_backward(). Every method that touches the per-backward
// state holds mu_, unless it says otherwise.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/nn/comm_hook.h"
#include "kindling/nn/ddp.h"
#include "nn/broadcast_coalesced.h"
#include "nn/ddp/ddp_autotune.h"
#include "nn/ddp/ddp_bucket_set.h"
#include "nn/ddp/ddp_join_state.h"
#include "nn/ddp/ddp_rebuild_state.h"
#include "nn/ddp/ddp_step_timer.h"

namespace kindling {
namespace nn {
struct GradientReducer::State : std::enable_shared_from_this<GradientReducer::State> {
 public:
  // --- Construction (src/nn/ddp/ddp.cpp): the user's thread, every rank of options.group().
  // Checks the options, collects `module`'s parameters and buffers, checks that every rank has
  // the same settings and parameters, broadcasts them from the group's first rank, makes the
  // buckets. Collectives over the group. Throws kindling::UsageError as GradientReducer's
  // constructor documents, and what the collectives throw.
  State(const torch::nn::Module& module, DdpOptions options);
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  // Installs on each parameter's gradient accumulator the hook that calls mark_ready(). Once,
  // right after construction (it needs shared_from_this()). Local.
  void hook_accumulators();

  // --- One synchronised backward (src/nn/ddp/ddp_state.cpp): autograd's threads.
  // Parameter i's gradient is in (its accumulator's post hook): the first call of a backward
  // queues finish_backward() and (static_graph) marks the known-unused parameters ready; the
  // gradient goes into its bucket, and complete buckets are launched in index order (collectives
  // over the group). Does nothing outside synchronisation (no_sync). Throws kindling::UsageError
  // for a missing or sparse gradient.
  void mark_ready(std::size_t i);
  // The engine's final callback: zeros for the parameters with no gradient (where allowed), the
  // unused-parameter all-reduce, the wait for every bucket, the averages into .grad(), the
  // first backward's rebuild and the autotune's step; then ready for the next backward.
  // Collectives over the group. Throws kindling::UsageError, after waiting for what was
  // launched, for parameters with no gradient where not allowed or a changed static graph.
  void finish_backward();

  // --- Forward (src/nn/ddp/ddp.cpp): the user's thread, GradientReducer::before/after_forward.
  // A synchronised forward starts: times it, counts the ranks still training in join mode (an
  // all-reduce), broadcasts the buffers from the group's first rank where the options say so.
  // Collectives over the group; the caller checked grad mode and sync. Only the timing is
  // under the lock (no backward runs during a forward).
  void before_forward();
  // The module's forward returned (or threw): times it. Does not throw.
  void after_forward() noexcept;

  // --- Reads and settings for GradientReducer's API (src/nn/ddp/ddp.cpp), which documents each:
  // any thread; local; they do not throw.
  // The bucket size in use (under the lock: the autotune changes it).
  double bucket_cap_mb() const;
  // The autotune's scores so far (under the lock).
  std::vector<BucketTrial> bucket_autotune() const;
  // The hook's name, or "none" (set at construction: not under the lock).
  std::string comm_hook_name() const;
  // The last synchronised step's StepTimes, and its wait for the reductions (under the lock).
  StepTimes last_step_times() const;
  double last_sync_wait_seconds() const;
  // Each bucket's parameter names, in launch order. Not under the lock (as before: buckets change
  // only inside a synchronised backward).
  std::vector<std::vector<std::string>> bucket_names() const;
  // Whether backward synchronises (NoSyncGuard turns it off). sync() reads without the lock.
  void set_sync(bool enabled);
  bool sync() const { return sync_; }
  // Synchronised backwards finished so far (read without the lock).
  int64_t synchronized_backwards() const { return synchronized_; }

  // --- Join (src/nn/ddp/ddp_join.cpp): the user's thread.
  // What Join's checks read: the options, whether a Join lives, whether the autotune is done.
  // Valid while the reducer lives; read it under lock() to check and enter in one step.
  struct JoinFacts {
    const DdpOptions& options;
    bool joining;
    bool autotune_done;
  };
  JoinFacts join_facts() const { return {options_, join_.joining(), autotune_.done()}; }
  // The reducer's lock, for Join::Join's checks and enter_join() to be one step.
  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mu_); }
  // Enters join mode (the caller holds lock()): every rank training, the buckets frozen as they
  // are (a rank may join before its first backward). Local.
  void enter_join(bool divide_by_initial_world);
  // Leaves join mode. Local; does not throw.
  void leave_join() noexcept;
  // A joined rank's mirror of one step while `active` ranks still train: the buffers' broadcast
  // where the options say so, then shadow_backward() (which alone takes the lock: no backward
  // runs on a joined rank). Collectives over the group.
  void mirror_step(int64_t active);
  // After the last step: the parameters and buffers broadcast from global rank `from` (the last
  // rank to join), then every rank counted as training again. A collective over the group;
  // not under the lock (no backward runs on a joined rank).
  void broadcast_model(int from);

 private:
  // --- Helpers of the methods above; the caller holds mu_ unless it says otherwise.
  // Launches the complete buckets in index order (BucketSet::launch with the options' hook).
  void launch_in_order() { buckets_.launch(options_.comm_hook(), options_.group()); }
  // Ready for the next backward: no gradient in, nothing launched, no graph change seen.
  void reset_iteration();
  // The parameters with no gradient in this backward refused (throws, after the wait for what
  // was launched) unless `learn_unused`, else zeroed and counted in.
  void handle_missing(const std::vector<std::size_t>& missing, bool learn_unused);

  // Defined in src/nn/ddp_rebuild.cpp.
  // At the end of the first synchronised backward: the buckets made again in the order in which
  // the group's first rank saw gradients become ready (a broadcast over the group; every rank
  // runs it there), the gradients that lived in the old buckets moved into the new ones.
  void rebuild_buckets();
  // static_graph: as a synchronised backward starts, the parameters known unused marked ready.
  void begin_iteration();
  // static_graph: throws kindling::UsageError, after waiting for what was launched, when this
  // backward's graph is not the first one's (`missing`: parameters with no gradient now).
  void require_same_graph(const std::vector<std::size_t>& missing);
  // After the first synchronised backward: learns the graph (static_graph) and rebuilds the
  // buckets where that is done (`used`: which parameters some rank used, or undefined).
  void after_first_backward(const std::vector<std::size_t>& missing, const at::Tensor& used);
  // The buckets made again from `order`, the gradients that lived in the old ones moved into the
  // new ones.
  void remake_buckets(const std::vector<std::size_t>& order);

  // Defined in src/nn/ddp_join.cpp.
  // Before a synchronised forward in join mode: counts the ranks still training (an all-reduce).
  void notify_join();
  // A joined rank's mirror of one synchronised backward (takes mu_): every bucket reduced with
  // zeros as this rank's terms, the unused-parameter all-reduce, the averages put into .grad().
  void shadow_backward();
  // divide_by_initial_world_size(false): the buckets' averages over the ranks that trained.
  void rescale_for_join();

  // Set at construction; options_'s bucket_cap_mb changes with the autotune, its comm_hook
  // may be set there to the hierarchical all-reduce.
  DdpOptions options_;
  int world_ = 1;
  at::Tensor scale_;  // 1 / world as a 0-dim double (a wrapped number: keeps the gradients' dtype)
  int src_ = 0;       // the group's first rank (global)
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;  // one per parameter
  std::vector<at::Tensor> buffers_;
  // The hooks live only while these do (a shared_ptr in LibTorch 1.13, an intrusive_ptr in 2.15).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> accumulators_;

  // Per-backward state, under mu_.
  bool callback_queued_ = false;  // finish_backward() is queued for this backward
  bool sync_ = true;
  int64_t synchronized_ = 0;
  detail::Rebuild rebuild_;
  detail::Autotune autotune_;
  detail::StepTimer timer_;
  detail::JoinState join_;
  mutable std::mutex mu_;
  // Declared last: destroyed first, it copies the gradients that live in it out of the buckets
  // before anything else of the reducer goes.
  detail::BucketSet buckets_{params_};
};

}  // namespace nn
}  // namespace kindling
