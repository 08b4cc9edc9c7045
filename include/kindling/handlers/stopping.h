#pragma once
/// \file
/// Handlers that stop training (ignite's): TerminateOnNan and EarlyStopping.
///
/// \code
///   trainer.on(Events::ITERATION_COMPLETED, kindling::handlers::TerminateOnNan());
///   auto stopper = std::make_shared<kindling::handlers::EarlyStopping>(
///       5, [](Engine& e) { return e.state().metrics.at("accuracy").number(); }, trainer);
///   evaluator.on(Events::COMPLETED, [stopper](Engine& e) { (*stopper)(e); });
/// \endcode
///
/// Ranks: both decide from values every rank has alike (a loss averaged over ranks, a metric
/// reduced by its compute), so every rank terminates at the same iteration; given a per-rank
/// value they could decide differently and the ranks' collectives would then no longer match.

#include <cstdint>
#include <functional>
#include <optional>

#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"

namespace kindling {
namespace handlers {

/// Terminates the engine when its output (after output_transform) holds a NaN or an
/// infinity: numbers, tensors, tuples and named tensors are all checked.
///
/// Beyond ignite, it marks the run it ends: state().attributes[kStateKey] holds the
/// iteration whose output was not finite, so that code after run() can tell a run it ended
/// from one that completed (run() returns alike). The mark stays until removed; it is not
/// saved by Engine::state_dict() unless its name is among state_dict_user_keys().
class KINDLING_API TerminateOnNan {
 public:
  /// The name of the state attribute that marks a run TerminateOnNan ended.
  static constexpr const char* kStateKey = "terminated_on_nan";

  explicit TerminateOnNan(std::function<engine::Value(const engine::Value&)> output_transform = {})
      : output_transform_(std::move(output_transform)) {}
  /// Logs a warning naming the output, marks the state (kStateKey) and calls
  /// engine.terminate(). Local.
  void operator()(engine::Engine& engine) const;
  /// The iteration at which a TerminateOnNan ended the engine's run; unset when none did.
  /// Local; never throws.
  static std::optional<int64_t> ended_at(const engine::Engine& engine);

 private:
  std::function<engine::Value(const engine::Value&)> output_transform_;
};

/// Stops `trainer` when score_function(engine) has not improved by more than min_delta for
/// `patience` calls in a row (higher scores are better). With cumulative_delta the best score
/// is only raised by improvements above min_delta (small gains accumulate against it).
class KINDLING_API EarlyStopping {
 public:
  /// Throws kindling::UsageError for patience < 1, a negative min_delta or an empty score function.
  EarlyStopping(int patience, std::function<double(engine::Engine&)> score_function, engine::Engine& trainer,
                double min_delta = 0.0, bool cumulative_delta = false);
  /// Call it where the score is known (e.g. the evaluator's COMPLETED). Local.
  void operator()(engine::Engine& engine);
  int counter() const { return counter_; }
  std::optional<double> best_score() const { return best_score_; }
  /// {"counter", "best_score"}.
  StateDict state_dict() const;
  /// Throws kindling::UsageError when a key is missing.
  void load_state_dict(const StateDict& state);

 private:
  int patience_;
  std::function<double(engine::Engine&)> score_function_;
  engine::Engine& trainer_;
  double min_delta_;
  bool cumulative_delta_;
  int counter_ = 0;
  std::optional<double> best_score_;
};

}  // namespace handlers
}  // namespace kindling
