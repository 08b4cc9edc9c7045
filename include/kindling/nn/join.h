#pragma once
/// \file
/// Uneven inputs in training: torch's Join context manager for kindling's DDP. A rank whose data
/// ends early calls join(): it then takes part in the collectives of the others' training steps
/// (with zero gradients) until every rank has joined, so nobody waits forever.
///
/// \code
///   kindling::nn::Join join(model);                     // on every rank, before the loop
///   for (auto& batch : loader) {                         // ranks may have different counts
///     optimizer.zero_grad();
///     loss_fn(model(batch.data), batch.target).backward();
///     optimizer.step();
///   }
///   join.join([&] { optimizer.step(); });               // shadows the others' steps
/// \endcode
///
/// While a Join lives, each synchronised forward (gradients enabled, sync on) of the model
/// starts with a one-integer all-reduce that counts the ranks still training; a joined rank
/// answers 0 and then mirrors the step: the buffers' broadcast, the buckets' reductions in
/// index order with zeros as its gradients (through the model's comm hook, if any), the
/// unused-parameter all-reduce (find_unused_parameters). Its `.grad()` then holds the group's
/// average, and `after_each_backward` (the optimizer's step, or anything that communicates as the
/// training ranks' step does: a ZeroRedundancyOptimizer's step, GradScaler) runs. When every
/// rank has joined, the parameters and buffers are broadcast from the last rank to join, so all
/// ranks end with the same model (as torch's Join).
///
/// Rules (the others' collectives must be mirrored exactly): construct the Join on every rank at
/// the same point, before their loops; each training iteration is one synchronised forward and
/// one backward, then the step (another forward with gradients, or communication between, is
/// not mirrored); not with DdpOptions::static_graph. The buckets are not rebuilt in the order of
/// readiness after a Join was made (all ranks must agree, and a rank may join before its first
/// backward).

#include <functional>
#include <memory>

#include "kindling/export.h"
#include "kindling/nn/ddp.h"
#include "kindling/options.h"

namespace kindling {
namespace nn {

/// Options of Join. Chain the setters; they do not check or throw.
struct KINDLING_API JoinOptions {
  /// As torch's divide_by_initial_world_size: true (default) divides the sum of the gradients
  /// by the group's size even when some ranks have joined (their zeros make the average
  /// smaller); false divides by the number of ranks still training in that iteration.
  KINDLING_ARG(bool, divide_by_initial_world_size) = true;
};

/// The Join of the file comment, for one DDP model.
class KINDLING_API Join {
 public:
  /// Puts `reducer` (the DDP model's; null in the serial model: the Join then does nothing) in
  /// join mode. Local, no communication. Throws kindling::UsageError for a model built with
  /// static_graph, or one already in a live Join.
  explicit Join(GradientReducer* reducer, JoinOptions options = JoinOptions());
  template <class M>
  explicit Join(DistributedDataParallel<M>& model, JoinOptions options = JoinOptions())
      : Join(model.reducer(), options) {}
  /// Leaves join mode (no communication; a rank that did not call join() leaves the others
  /// waiting until their timeout).
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  /// This rank's inputs are done: mirrors the others' iterations (calling `after_each_backward`
  /// after each mirrored backward) until every rank of the group has joined, then broadcasts the
  /// model from the last rank to join. A collective over the model's group: every rank calls it
  /// once, after its loop. Throws kindling::UsageError when called twice, or without
  /// `after_each_backward` under a ZeroRedundancyOptimizer's hook (its step is a collective);
  /// kindling::TimeoutError / kindling::CommunicationError from the collectives, and what
  /// `after_each_backward` throws.
  void join(const std::function<void()>& after_each_backward = nullptr);

  /// Iterations this rank mirrored in join() (0 for the last ranks to join). Local.
  int64_t shadowed_iterations() const { return shadowed_; }

 private:
  std::shared_ptr<GradientReducer::State> state_;
  bool joined_ = false;
  int64_t shadowed_ = 0;
};

}  // namespace nn
}  // namespace kindling
