#pragma once
/// \file
/// ReplicaCheck: compares the data-parallel replicas' parameters every N iterations of a
/// trainer and stops the run, naming the rank whose weights diverged (a flipped bit) and the
/// parameters that differ (kindling::dist::check_replicas, kindling/dist/replica_check.h, has
/// the fingerprint and its rules).
///
/// \code
///   auto model = kd::auto_model(net);
///   auto trainer = ke::create_supervised_trainer(model, optimizer, loss);
///   std::make_shared<kh::ReplicaCheck>(net.ptr())->attach(trainer);       // every 100 iterations
///   std::make_shared<kh::ReplicaCheck>(net.ptr())->attach(trainer, 500);  // or every 500
/// \endcode
///
/// At a check whose replicas differ, every rank throws kindling::dist::ReplicaDivergedError out
/// of the engine with the same message: with 3 ranks or more the ranks outside the majority
/// are named, with 2 ranks that disagree both are (no majority), each with the parameters that
/// differ and the iterations between which it happened (this check and the last equal one).
/// Inside kindling::handlers::LiveRecovery::run under `kindling-run --live_recovery`, the
/// diverged ranks' hosts leave the job and the other ranks go on from their last commit in a
/// new world, as after a lost host (live_recovery.h); without a majority every host leaves and
/// the job stops.
///
/// Cost: one pass over the parameters (their fingerprints) and one all_gather of one int64 per
/// parameter; for a ResNet-18 docs/fault-tolerance.md gives it against a training step. The
/// check runs on ITERATION_COMPLETED, after the optimizer's step, where the replicas are equal.

#include <cstdint>
#include <memory>

#include "kindling/dist/replica_check.h"  // also declares torch::nn::Module
#include "kindling/engine/engine.h"
#include "kindling/export.h"

namespace kindling {
namespace handlers {

/// Compares the replicas of a module every N iterations; see the file comment.
class KINDLING_API ReplicaCheck : public std::enable_shared_from_this<ReplicaCheck> {
 public:
  /// Iterations between two checks when attach() is not told: 100. A divergence is found
  /// within that many iterations; the check's cost, spread over them, is under 0.1% of a
  /// ResNet-18 step on CPU ranks (docs/fault-tolerance.md has the figures and commands).
  static constexpr int64_t kDefaultEvery = 100;

  /// Checks `module`'s parameters (the module a DDP model wraps: `model.module()`, or the
  /// module given to auto_model) with `options` (buffers, the group; options.context() is
  /// replaced by the iteration). Throws kindling::UsageError for a null module. Local.
  explicit ReplicaCheck(std::shared_ptr<torch::nn::Module> module,
                        dist::ReplicaCheckOptions options = dist::ReplicaCheckOptions());

  /// Checks now: kindling::dist::check_replicas on the module, the message saying the engine's
  /// iteration and that of the last check that found the replicas equal. Collective over the
  /// group: every rank calls it at the same iteration. Throws
  /// kindling::dist::ReplicaDivergedError (on every rank) and what the all_gather throws.
  void operator()(engine::Engine& engine);
  /// Runs operator() on Events::ITERATION_COMPLETED every `every` iterations (>= 1) of
  /// `engine`. The engine keeps the handler alive; throws kindling::UsageError for every < 1 or
  /// unless a std::shared_ptr owns the handler. Attach it on every rank.
  engine::HandlerHandle attach(engine::Engine& engine, int64_t every = kDefaultEvery);

  /// Checks made so far on this rank. Local; does not throw.
  int64_t checks() const { return checks_; }
  /// The iteration of the last check that found the replicas equal (-1 before one). Local.
  int64_t last_equal_iteration() const { return last_equal_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  dist::ReplicaCheckOptions options_;
  int64_t checks_ = 0;
  int64_t last_equal_ = -1;
};

}  // namespace handlers
}  // namespace kindling
