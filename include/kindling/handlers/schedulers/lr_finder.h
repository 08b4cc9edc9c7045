#pragma once
/// \file
/// FastaiLRFinder (ignite's): the learning-rate range test. While it is attached, the
/// optimizer's learning rate grows from start_lr to end_lr over num_iter iterations of the
/// trainer and each iteration's loss is recorded, smoothed; the run stops once the loss
/// diverges. When the attachment ends, the model, the optimizer and the trainer are put back
/// exactly as they were, and lr_suggestion() gives the learning rate where the loss fell
/// fastest.
///
/// \code
///   namespace kh = kindling::handlers;
///   auto finder = std::make_shared<kh::FastaiLRFinder>();
///   {
///     auto attached = finder->attach(trainer, {{"model", kh::stateful(model)}}, optimizer,
///                                    kh::FastaiLRFinderOptions().start_lr({1e-5}).end_lr({1.0}).num_iter(100));
///     trainer.run(train_loader, 1);
///   }  // handlers removed; model, optimizer and trainer restored (ignite's `with` block ends)
///   finder->apply_suggested_lr(optimizer);  // lr_suggestion(): one lr per parameter group
///   trainer.run(train_loader, 10);
/// \endcode
///
/// The schedule: iteration i + 1 of the test (i = 0 .. n - 1, n = num_iter) runs with, in
/// each parameter group, lr_i = start_lr * (end_lr / start_lr)^(i / (n - 1)) (step_mode
/// "exp") or lr_i = start_lr + (end_lr - start_lr) * i / (n - 1) ("linear"): the first
/// iteration at start_lr, the n-th at end_lr (start_lr alone when n = 1). It is set at
/// ITERATION_STARTED, so it overrides another scheduler attached before the finder.
///
/// The loss: l_i = output_transform(state().output).number(), averaged over the ranks; the
/// recorded loss is s_0 = l_0 and s_i = smooth_f * l_i + (1 - smooth_f) * s_{i-1} (smooth_f
/// = 0: no smoothing), ignite's exponential smoothing. get_results() pairs s_i with lr_i.
///
/// The stop: after the iteration where s_i > diverge_th * min(s_0 .. s_i), or where s_i is
/// not a finite number, the finder calls terminate() (TERMINATE, then COMPLETED); otherwise
/// after the n-th iteration. When num_iter is unset, n is the rest of the run (max_iters, or
/// max_epochs * epoch_length, less the iterations done); when the run is shorter than
/// num_iter, its max_epochs (or max_iters) is raised to fit, as ignite does. A run that ends
/// without the loss diverging logs a warning (rank 0).
///
/// The suggestion (ignite's rule): take the recorded losses up to their minimum (the first
/// one when tied), the falling part of the curve; it needs at least 3 points. At each inner
/// point j (both ends skipped) the slope is 0.5 * (s_{j+1} - s_{j-1}); the suggestion is lr_j
/// at the steepest fall (the most negative slope, the first when tied).
///
/// Restoring (ignite's context manager, as an RAII guard): attach() copies the state dicts of
/// the optimizer, of every object in `to_save` and of the trainer (deep copies, in memory), and
/// returns an LRFinderGuard. Its detach(), or its destructor, removes the finder's handlers
/// and loads the copies back: parameters, buffers and optimizer state (SGD momentum buffers,
/// Adam moments) bit for bit, and the trainer's counters, so that its next run() starts
/// afresh (or where it stood). Add kh::rng_states() to `to_save` to restore the random
/// generators too (ignite does not).
///
/// Differences from ignite, on purpose: ignite records with the loss of iteration k the lr it
/// sets for iteration k + 1 (exp: start * (end / start)^(k / n), linear: start + (end - start)
/// * (k - 1) / n) and runs num_iter + 1 iterations when the data allows; here each loss goes
/// with the lr its iteration ran with, there are num_iter iterations, and the range is
/// start_lr .. end_lr inclusive. ignite sums the loss over the ranks, here it is averaged
/// (the same decisions and suggestion: every test is scale-free). A loss that turns NaN or
/// infinite stops the test (ignite goes on). There is no plot(); get_results() has the curve.
///
/// Ranks: attach and run it on every rank. Each iteration all-reduces the loss over the world
/// (kindling::dist, one 8-byte all-reduce: a collective every rank must reach, as a DDP step
/// is), so every rank records the same curve, stops at the same iteration and gets the same
/// suggestion, even when their data and losses differ. Each rank sets and restores its own
/// optimizer and model. In the serial model nothing communicates.

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/value.h"
#include "kindling/export.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "kindling/options.h"

namespace kindling {
namespace handlers {

/// Options of FastaiLRFinder::attach (chain the setters): ignite's arguments and defaults.
class KINDLING_API FastaiLRFinderOptions {
 public:
  /// The loss of an iteration from the trainer's output (state().output); its number() is
  /// taken. Default (empty): the output itself, a number or a one-element tensor.
  KINDLING_ARG(std::function<engine::Value(const engine::Value&)>, output_transform);

  /// Iterations of the test (>= 1). Unset: the rest of the run (see the file comment).
  KINDLING_ARG(std::optional<int64_t>, num_iter);

  /// The first lr: empty (default) for each group's lr at attach(), one value for every
  /// parameter group, or one per group. >= 0, and > 0 for step_mode "exp".
  KINDLING_ARG(std::vector<double>, start_lr);

  /// The last lr: one value for every group (default 10) or one per group; above start_lr.
  KINDLING_ARG(std::vector<double>, end_lr) = {10.0};

  /// How the lr grows: "exp" (geometrically, default) or "linear".
  KINDLING_ARG(std::string, step_mode) = "exp";

  /// Weight of the new loss in the smoothed loss, in [0, 1) (default 0.05).
  KINDLING_ARG(double, smooth_f) = 0.05;

  /// Stop once the smoothed loss exceeds diverge_th times the best one (>= 1; default 5).
  KINDLING_ARG(double, diverge_th) = 5.0;
};

/// The curve of the last range test (FastaiLRFinder::get_results(), ignite's {"lr", "loss"}).
struct KINDLING_API LRFinderResults {
  /// The learning rate of each iteration of the test, one per parameter group: lr[i][g].
  std::vector<std::vector<double>> lr;
  /// The smoothed loss of each iteration (averaged over the ranks), same length as lr.
  std::vector<double> loss;
};

class FastaiLRFinder;

/// What FastaiLRFinder::attach returns: the attachment, ended by detach() or the destructor
/// (removes the handlers and restores the objects and the trainer). Movable, not copyable.
/// The trainer and the objects given to attach() must outlive it. Local.
class KINDLING_API LRFinderGuard {
 public:
  /// Takes over `other`'s attachment (`other` then ends nothing).
  LRFinderGuard(LRFinderGuard&& other) noexcept;
  LRFinderGuard& operator=(LRFinderGuard&&) = delete;
  LRFinderGuard(const LRFinderGuard&) = delete;
  LRFinderGuard& operator=(const LRFinderGuard&) = delete;
  /// detach() unless done; an error there is written to kindling's log (never thrown).
  ~LRFinderGuard();

  /// Ends the attachment now: removes the finder's handlers, then loads back the saved states
  /// (every one is tried). Throws kindling::Error with the first failure's message when one
  /// could not be loaded. A no-op the second time. Local.
  void detach();
  /// The trainer attached to (ignite's `trainer_with_lr_finder`). Throws
  /// kindling::UsageError after detach().
  engine::Engine& trainer() const;

 private:
  friend class FastaiLRFinder;
  explicit LRFinderGuard(std::shared_ptr<FastaiLRFinder> finder);
  std::shared_ptr<FastaiLRFinder> finder_;  // null once detached
};

/// ignite's FastaiLRFinder; see the file comment.
class KINDLING_API FastaiLRFinder : public std::enable_shared_from_this<FastaiLRFinder> {
 public:
  /// A finder not attached yet, with no results. Does not throw.
  FastaiLRFinder();
  ~FastaiLRFinder();
  FastaiLRFinder(const FastaiLRFinder&) = delete;
  FastaiLRFinder& operator=(const FastaiLRFinder&) = delete;

  /// Saves the states of `optimizer`, of each object of `to_save` (e.g. {"model",
  /// stateful(model)}) and of `trainer`, and attaches the test's handlers to `trainer` for
  /// its next run()s (each run is a new test). `optimizer` is the one the trainer steps; it
  /// need not be in `to_save`. Keep the returned guard while the trainer runs: the attachment
  /// ends with it. Throws kindling::UsageError (changing nothing) when no std::shared_ptr
  /// owns the finder, when it is already attached, for an option out of its range (ignite's
  /// messages), a start_lr / end_lr list whose size is not the number of parameter groups, a
  /// start_lr not below its end_lr, or a null object; throws what a state_dict() throws.
  /// Every rank calls it (the run that follows communicates).
  [[nodiscard]] LRFinderGuard attach(engine::Engine& trainer, const Objects& to_save,
                                     torch::optim::Optimizer& optimizer,
                                     const FastaiLRFinderOptions& options = FastaiLRFinderOptions());

  /// The curve of the last test ({} before one ran). Local.
  const LRFinderResults& get_results() const { return history_; }
  /// Whether the last test stopped because the loss diverged. Local.
  bool diverged() const { return diverged_; }
  /// The index in get_results() of the suggested lr (the rule in the file comment). Throws
  /// kindling::UsageError when no test ran, or when the losses fall over fewer than 3 points
  /// (ignite's "unexpected curve shape": lower start_lr or raise end_lr). Local; the same on
  /// every rank.
  int64_t suggestion_index() const;
  /// The suggested lr, one per parameter group (get_results().lr[suggestion_index()]). Throws
  /// as suggestion_index().
  std::vector<double> lr_suggestion() const;
  /// Sets each parameter group's lr of `optimizer` to its suggestion. Throws as
  /// suggestion_index(), and kindling::UsageError when `optimizer` has another number of
  /// groups than the one tested.
  void apply_suggested_lr(torch::optim::Optimizer& optimizer) const;

 private:
  friend class LRFinderGuard;
  struct Session;
  void detach_session();
  void on_started(engine::Engine& trainer);
  void on_iteration_started();
  void on_iteration_completed(engine::Engine& trainer);
  void on_completed() const;

  std::unique_ptr<Session> session_;  // set while attached
  LRFinderResults history_;
  bool ran_ = false;
  bool diverged_ = false;
  double best_loss_ = 0;
};

}  // namespace handlers
}  // namespace kindling
