#pragma once
/// \file
/// TimeLimit (ignite's): ends training gracefully once a wall-time budget is spent, for
/// clusters whose jobs are killed after a fixed time (checkpoint on COMPLETED to resume).
///
/// \code
///   auto limit = std::make_shared<kindling::handlers::TimeLimit>(8 * 3600);  // 8 hours
///   limit->attach(trainer);  // Events::ITERATION_COMPLETED, on every rank
///   std::make_shared<kh::Checkpoint>(to_save, "ckpt")->attach(trainer, Events::COMPLETED);
/// \endcode
///
/// The clock starts when the handler is constructed (ignite's rule), not when the run starts.
/// At an event where the time since then exceeds limit_sec, it logs a warning and calls
/// engine.terminate(): TERMINATE then COMPLETED fire and run() returns.
///
/// Ranks: the ranks of a distributed run must stop at the same iteration, else the next
/// collective of the ranks that go on never matches. Their clocks differ (each started at its
/// own construction, each rank runs at its own pace), so every check is one all_reduce(MAX) of
/// the ranks' elapsed seconds over the world (kindling::dist): every rank stops as soon as one
/// rank's time is past the limit. Attach it on every rank of the world, to the same event: it
/// is a collective every check_every calls. Cost: one 8-byte all-reduce per check, measured at
/// 0.33 ms (2 ranks) and 0.56 ms (3 ranks) over gloo on a busy 2-core host (bench_collectives
/// -b 8 -e 8): under 1% of iterations of 50 ms and more; raise check_every for shorter ones. The
/// serial model does not communicate.

#include <chrono>
#include <cstdint>
#include <memory>

#include "kindling/engine/engine.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace handlers {

/// Options of TimeLimit (chain the setters).
class KINDLING_API TimeLimitOptions {
 public:
  /// Check the time at every check_every-th call only (>= 1; default 1, each iteration). In a
  /// distributed run each check is an all-reduce; the stop may come up to check_every - 1
  /// calls after the limit.
  KINDLING_ARG(int64_t, check_every) = 1;
};

/// ignite's TimeLimit; see the file comment.
class KINDLING_API TimeLimit : public std::enable_shared_from_this<TimeLimit> {
 public:
  /// Starts the clock. limit_sec: the budget in seconds, > 0 (default 28800, 8 hours; ignite
  /// takes whole seconds, this takes fractions too). Throws kindling::UsageError for a
  /// limit_sec that is not a positive finite number or check_every < 1. Local.
  explicit TimeLimit(double limit_sec = 28800, const TimeLimitOptions& options = TimeLimitOptions());

  /// Checks the time (every check_every calls) and terminates `engine` when the limit is past
  /// on any rank. Distributed: a collective over the world at each check (see the file
  /// comment); every rank must call it the same number of times. Throws what the all-reduce
  /// throws (kindling::TimeoutError when a rank does not call it).
  void operator()(engine::Engine& engine);
  /// Runs operator() on `event` (default Events::ITERATION_COMPLETED). The engine keeps the
  /// handler alive; throws kindling::UsageError unless a std::shared_ptr owns it.
  engine::HandlerHandle attach(engine::Engine& engine,
                               const engine::EventsList& event = engine::Events::ITERATION_COMPLETED);

  /// The budget in seconds, as given to the constructor. Local; does not throw.
  double limit_sec() const { return limit_sec_; }
  /// The time is checked (an all-reduce in a distributed run) at every check_every-th call
  /// (TimeLimitOptions::check_every). Local; does not throw.
  int64_t check_every() const { return check_every_; }
  /// Seconds since construction on this rank's clock. Local.
  double elapsed() const;

 private:
  double limit_sec_;
  int64_t check_every_;
  int64_t calls_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace handlers
}  // namespace kindling
