#pragma once
/// \file
/// Timer (ignite's): wall time between engine events, optionally averaged per step.
///
/// \code
///   auto per_iteration = std::make_shared<kindling::handlers::Timer>(/*average=*/true);
///   per_iteration->attach(trainer, Events::EPOCH_STARTED, Events::EPOCH_COMPLETED,
///                         Events::ITERATION_STARTED, Events::ITERATION_COMPLETED);
///   ... per_iteration->value()   // seconds per iteration in the current epoch
/// \endcode
///
/// Local: no communication. The engine keeps an attached timer alive (keep_alive.h).

#include <chrono>
#include <memory>
#include <optional>

#include "kindling/engine/engine.h"
#include "kindling/export.h"

namespace kindling {
namespace handlers {

class KINDLING_API Timer : public std::enable_shared_from_this<Timer> {
 public:
  /// average: value() divides the elapsed time by the number of step() calls.
  explicit Timer(bool average = false);
  /// Resets on `start`, pauses on `pause`, resumes on `resume`, counts a step on `step`
  /// (the last three optional). Returns *this. Throws kindling::UsageError when no
  /// std::shared_ptr owns the timer (the engine keeps it alive: keep_alive.h).
  Timer& attach(engine::Engine& engine, const engine::Event& start = engine::Events::STARTED,
                std::optional<engine::Event> pause = std::nullopt, std::optional<engine::Event> resume = std::nullopt,
                std::optional<engine::Event> step = std::nullopt);
  /// Starts over (running, no time, no steps).
  void reset();
  /// Stops the clock; time while paused does not count.
  void pause();
  void resume();
  void step() { ++steps_; }
  /// Seconds measured (running or paused), divided by the steps when averaging (and at least one).
  double value() const;
  bool running() const { return running_; }

 private:
  bool average_;
  bool running_ = true;
  double total_ = 0.0;
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point since_;
};

}  // namespace handlers
}  // namespace kindling
