#pragma once
/// \file
/// Timeline: what every rank did during a range of iterations, as a Chrome trace (the JSON
/// "trace event" format that Perfetto, chrome://tracing and TensorBoard's trace viewer load),
/// all ranks on rank 0's clock.
///
/// \code
///   namespace kh = kindling::handlers;
///   auto timeline = std::make_shared<kh::Timeline>(kh::TimelineOptions().folder("run/timeline")
///                                                      .first_iteration(20).last_iteration(22));
///   timeline->attach(trainer);               // the range counts the trainer's iterations
///   timeline->watch(evaluator, "evaluator"); // optional: an evaluation inside the range, in detail
///   trainer.run(loader, 3);                  // writes run/timeline/timeline.json (rank 0) and
///                                            // run/timeline/timeline_rank_<r>.json (each rank)
/// \endcode
///
/// What a rank's trace holds (docs/debugging.md reads one): on the "engine" row, each iteration,
/// the data wait, the process function, each event firing that ran handlers and each handler by
/// name (engine::handler_name), checkpoint writes, the watched engines' iterations; on the
/// "step" row, the supervised trainer's zero_grad, prepare batch, forward, loss, backward and
/// optimizer step, with DDP's wait for its buckets and write back at the end of backward, and
/// any kindling::timeline::Span of the user's; on the "communication" rows, every operation of
/// kindling::dist with its group, sequence number (the flight recorder's), dtype and bytes
/// (operations that overlap, such as DDP's buckets, take one row each). A bucket's span runs
/// from its start during backward to the moment its engine completed it (gloo), or to the end
/// of DDP's wait for it where the engine cannot say (mpi, nccl).
///
/// One clock: when the range starts, every rank measures its offset to rank 0's steady clock
/// (kindling/dist/clock.h); every time written is rank 0's, in microseconds from rank 0's start
/// of the range. Each event's args say which row it is on; the trace's otherData holds each
/// rank's offset and its uncertainty.
///
/// Ranks: the start and the end of the range are collectives (the clock measurement, then the
/// gather of every rank's events to rank 0): every rank must run the range's first iteration
/// and reach its last one or the run's end, as DDP training does. A run that fails inside the
/// range writes this rank's file alone (no gather). Cost: off outside the range (one atomic
/// load per span); inside it, docs/performance.md gives the measured cost per step.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/export.h"
#include "kindling/options.h"
#include "kindling/timeline.h"

namespace kindling {
namespace handlers {

/// Options of Timeline.
struct KINDLING_API TimelineOptions {
  /// The folder of the trace files (made when missing, on every rank that writes).
  KINDLING_ARG(std::string, folder) = "timeline";
  /// The trainer's first and last iteration recorded (ignite's global iteration, 1 for the
  /// first; both included). last_iteration >= first_iteration >= 1.
  KINDLING_ARG(int64_t, first_iteration) = 1;
  KINDLING_ARG(int64_t, last_iteration) = 1;
  /// Events kept per rank at most (later ones are dropped and counted in otherData).
  KINDLING_ARG(std::size_t, max_events) = 1000000;
  /// Round trips per rank when the clocks are measured (kindling::dist::measure_clock_offset).
  KINDLING_ARG(int, clock_rounds) = 8;
};

/// One rank's recorded events, on rank 0's clock (start_ns and end_ns: nanoseconds from rank
/// 0's start of the range).
struct KINDLING_API RankTimeline {
  int rank = 0;
  int64_t clock_offset_ns = 0;
  int64_t clock_uncertainty_ns = 0;
  /// Events this rank dropped because it held max_events.
  int64_t dropped_events = 0;
  std::vector<timeline::TimelineEvent> events;
};

/// Records a range of a trainer's iterations on every rank; see the file comment.
class KINDLING_API Timeline {
 public:
  /// Throws kindling::UsageError for first_iteration < 1, last_iteration < first_iteration,
  /// max_events == 0 or clock_rounds < 1. Local.
  explicit Timeline(TimelineOptions options = TimelineOptions());
  /// A timeline still recording (the run failed inside the range and no EXCEPTION_RAISED
  /// reached it) writes this rank's file; errors are logged, never thrown.
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// Records the range of `trainer`'s iterations (an observer of the engine; the engine keeps
  /// it alive). Throws kindling::UsageError when already attached to a trainer. Local (every
  /// rank attaches its own trainer).
  void attach(engine::Engine& trainer);
  /// Also shows `engine`'s iterations, data waits and handlers while the range records (an
  /// evaluator run by a trainer's handler), its iterations named "<name> iteration <n>".
  /// Local.
  void watch(engine::Engine& engine, const std::string& name);

  /// Whether the range is being recorded now. Local; does not throw.
  bool recording() const;
  /// The files written by this rank (its own, and timeline.json on rank 0), empty before the
  /// range ends. Local; does not throw.
  std::vector<std::string> files() const;
  /// After the range: on rank 0 every rank's events, by rank; on another rank its own. Empty
  /// before. Local; does not throw.
  const std::vector<RankTimeline>& ranks() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace handlers
}  // namespace kindling
