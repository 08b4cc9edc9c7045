#pragma once
/// \file
/// HandlersTimeProfiler (ignite's): the time of every handler of an engine, each at each event
/// it is attached to (user-defined events included), with the data's and the process
/// function's time per iteration.
///
/// \code
///   namespace kh = kindling::handlers;
///   auto profiler = std::make_shared<kh::HandlersTimeProfiler>();
///   profiler->attach(trainer);
///   trainer.run(loader, 3);
///   kh::HandlersTimeProfiler::print_results(profiler->get_results());
///   profiler->write_results("profile/handlers_time.csv");
/// \endcode
///
/// Each call of a handler (one whose filter let the event through) is one measurement, in
/// seconds of std::chrono::steady_clock. A handler is named by engine::handler_name: the
/// type of the callable given to on() / add_event_handler (a lambda is named after the
/// function that wrote it, a function object by its class, the way ignite uses a function's
/// __qualname__), or "handler #k of EVENT" for function pointers and std::function. Dataflow
/// and processing are measured as by BasicTimeProfiler (kindling/handlers/profilers/time_profiler.h).
/// The measurements start over at each STARTED.
///
/// Differences from ignite: ignite wraps every handler attached when the run starts and
/// lists them all, with "not triggered" for those that never ran; this profiler observes
/// the engine (kindling/engine/observer.h), so it lists the handlers that ran, including
/// those added during the run. ignite drops the times under 0.1 ms of a filtered handler
/// (its wrapper runs even when the filter says no); here a filtered-out handler is not
/// called, so nothing is dropped. In the CSV file a shorter column ends with empty cells
/// (ignite pads it with zeros).
///
/// Ranks: local. Each rank profiles its own engine and nothing communicates; results and
/// files are this rank's (give each rank its own path, or write from rank 0 only).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/observer.h"
#include "kindling/export.h"
#include "kindling/handlers/profilers/time_profiler.h"

namespace kindling {
namespace handlers {

/// One handler at one event (a row of HandlersTimeProfilerResults).
struct KINDLING_API HandlerTimes {
  /// engine::handler_name of the handler.
  std::string handler;
  /// The event's name ("EPOCH_COMPLETED", or a user-defined event's name).
  std::string event;
  /// One measurement per call.
  TimeStats stats;
};

/// HandlersTimeProfiler::get_results(): ignite's rows, its "Total" row, and its
/// "Processing" and "Dataflow" rows.
struct KINDLING_API HandlersTimeProfilerResults {
  /// Ordered by event (the engine's order of events, user-defined ones last), then by the
  /// order the handlers were attached.
  std::vector<HandlerTimes> handlers;
  /// The time of all the handlers' calls, seconds.
  double total = 0;
  /// The process function, per iteration.
  TimeStats processing_stats;
  /// Drawing a batch, per iteration.
  TimeStats dataflow_stats;
};

/// ignite's HandlersTimeProfiler; see the file comment.
class KINDLING_API HandlersTimeProfiler : public engine::EventObserver,
                                          public std::enable_shared_from_this<HandlersTimeProfiler> {
 public:
  /// A profiler not attached yet, with no measurement. Does not throw.
  HandlersTimeProfiler();
  ~HandlersTimeProfiler() override;

  /// Starts profiling `engine` (from its next event). The engine keeps the profiler alive.
  /// Throws kindling::UsageError when no std::shared_ptr owns the profiler, or when it is
  /// already attached to an engine (one profiler per engine). Local.
  void attach(engine::Engine& engine);
  /// Stops profiling `engine`; the measurements stay. Throws kindling::UsageError when the
  /// profiler is not attached to it. Local.
  void detach(engine::Engine& engine);

  /// The summary so far (also during a run). Does not throw. Local.
  HandlersTimeProfilerResults get_results() const;
  /// `results` as ignite's table (Handler, Event Name, Total(s), Min(s)/IDX, Max(s)/IDX,
  /// Mean(s), Std(s), with a count column added), then its "Total" row and the "Processing
  /// took total ..." and "Dataflow took total ..." lines; written to kindling's log at INFO
  /// and returned. Does not throw.
  static std::string print_results(const HandlersTimeProfilerResults& results);
  /// Writes every measurement as CSV with ignite's columns: "#" (1, 2, ...),
  /// processing_stats, dataflow_stats, then "<handler> (<EVENT>)" per handler and event; row k
  /// holds each column's k-th measurement, empty where a column has fewer. The file is
  /// replaced at once (written beside it, then renamed): never left half-written. Creates
  /// missing parent folders. Throws kindling::Error naming the path and the system's reason
  /// when it cannot be written. Local: every rank calling it writes its own measurements.
  void write_results(const std::string& path) const;

  /// EventObserver: called by the engine.
  void before_event(engine::Engine& engine, const engine::Event& event) override;
  void after_event(engine::Engine& engine, const engine::Event& event) override;
  void handler_called(engine::Engine& engine, const engine::Event& event, const engine::HandlerInfo& handler,
                      double seconds) override;

 private:
  struct Series {
    std::string handler, event;
    std::vector<double> seconds;
  };

  const void* engine_id_ = nullptr;
  std::map<std::pair<int, int64_t>, Series> series_;  // (event id, handler id) -> its calls
  std::vector<double> processing_, dataflow_;
  std::unique_ptr<profiler_detail::FiringClock> clock_;
};

}  // namespace handlers
}  // namespace kindling
