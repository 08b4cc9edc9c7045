#pragma once
/// \file
/// BasicTimeProfiler (ignite's): where the time of an engine's run goes, per iteration: drawing
/// batches from the data, the process function, and the handlers of each event together;
/// summed up as ignite's statistics, printed as a table and written to a CSV file.
///
/// \code
///   namespace kh = kindling::handlers;
///   auto profiler = std::make_shared<kh::BasicTimeProfiler>();
///   profiler->attach(trainer);
///   trainer.on(Events::EPOCH_COMPLETED, [&] { kh::BasicTimeProfiler::print_results(profiler->get_results()); });
///   trainer.run(loader, 3);
///   profiler->write_results("profile/time_profiling.csv");
/// \endcode
///
/// What is measured, in seconds of std::chrono::steady_clock, at each firing of the engine:
/// - dataflow: from the end of GET_BATCH_STARTED's handlers to the start of
///   GET_BATCH_COMPLETED's: the time the data took to give one batch (with the handlers of
///   DATALOADER_STOP_ITERATION when the data starts over in between).
/// - processing: from the end of ITERATION_STARTED's handlers to the start of
///   ITERATION_COMPLETED's: the process function (ignite's definition).
/// - for each of ignite's eight events, STARTED, EPOCH_STARTED, ITERATION_STARTED,
///   ITERATION_COMPLETED, EPOCH_COMPLETED, COMPLETED, GET_BATCH_STARTED and
///   GET_BATCH_COMPLETED: the time all its handlers took at that firing (also when it has
///   none). TERMINATE, EXCEPTION_RAISED and the other events are not reported (nor in ignite).
///
/// The measurements start over at each STARTED (each new run; a run continued after
/// interrupt() keeps adding to them). They are kept per iteration, so memory grows by 64
/// bytes per iteration. The profiler is an engine observer (kindling/engine/observer.h),
/// not a handler: it adds no handler of its own, and observing costs two clock reads per
/// handler call.
///
/// Differences from ignite, on purpose: ignite's dataflow time runs from its first handler of
/// GET_BATCH_STARTED to its last of GET_BATCH_COMPLETED, so it also counts both events'
/// handlers, which are reported again as event times; here it is the data alone. A batch's
/// GET_BATCH_* times belong to the iteration the batch is for (ignite writes them one slot
/// early). Statistics count every measurement (ignite drops zeros, which stand for "not yet
/// triggered" in its preallocated arrays), and handler names list the handlers that ran.
///
/// Ranks: local. Each rank profiles its own engine and nothing communicates; results and
/// files are this rank's (give each rank its own path, or write from rank 0 only).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/observer.h"
#include "kindling/export.h"

namespace kindling {
namespace handlers {

namespace profiler_detail {
class FiringClock;
}

/// ignite's summary of a series of durations: total, min/index, max/index, mean, std.
struct KINDLING_API TimeStats {
  /// Measurements; 0 means "not triggered" (the other fields are then 0, the indices -1).
  int64_t count = 0;
  /// Sum, seconds.
  double total = 0;
  /// Smallest measurement (seconds) and its 0-based index in the series (the first when tied).
  double min = 0;
  int64_t min_index = -1;
  /// Largest measurement and its index (the first when tied).
  double max = 0;
  int64_t max_index = -1;
  /// total / count.
  double mean = 0;
  /// Sample standard deviation (divides by count - 1, as torch.std); NaN below 2 measurements.
  double std_dev = 0;

  /// The summary of `seconds`. Does not throw.
  static TimeStats of(const std::vector<double>& seconds);
};

/// The handlers' time of one event (a row of BasicTimeProfilerResults).
struct KINDLING_API EventHandlersTimes {
  /// The event's name, "ITERATION_COMPLETED".
  std::string event;
  /// One measurement per firing: the time its handlers took together.
  TimeStats stats;
  /// The handlers that ran at this event, in the order they first ran (engine::handler_name).
  std::vector<std::string> handler_names;
};

/// BasicTimeProfiler::get_results(): ignite's processing_stats, dataflow_stats,
/// event_handlers_stats (with total_time) and event_handlers_names.
struct KINDLING_API BasicTimeProfilerResults {
  /// The process function, per iteration.
  TimeStats processing_stats;
  /// Drawing a batch, per iteration.
  TimeStats dataflow_stats;
  /// ignite's eight events in its order: STARTED, EPOCH_STARTED, ITERATION_STARTED,
  /// ITERATION_COMPLETED, EPOCH_COMPLETED, COMPLETED, GET_BATCH_STARTED, GET_BATCH_COMPLETED.
  std::vector<EventHandlersTimes> event_handlers_stats;
  /// The sum of their totals (ignite's "total_time"), seconds.
  double event_handlers_total = 0;
};

/// ignite's BasicTimeProfiler; see the file comment.
class KINDLING_API BasicTimeProfiler : public engine::EventObserver,
                                       public std::enable_shared_from_this<BasicTimeProfiler> {
 public:
  /// A profiler not attached yet, with no measurement. Does not throw.
  BasicTimeProfiler();
  ~BasicTimeProfiler() override;

  /// Starts profiling `engine` (from its next event). The engine keeps the profiler alive.
  /// Throws kindling::UsageError when no std::shared_ptr owns the profiler, or when it is
  /// already attached to an engine (one profiler per engine). Local.
  void attach(engine::Engine& engine);
  /// Stops profiling `engine`; the measurements stay. Throws kindling::UsageError when the
  /// profiler is not attached to it. Local.
  void detach(engine::Engine& engine);

  /// The summary so far (also during a run). Does not throw. Local.
  BasicTimeProfilerResults get_results() const;
  /// `results` as a text table (seconds, 5 decimals; "not triggered" for what never ran),
  /// written to kindling's log at INFO and returned. Does not throw.
  static std::string print_results(const BasicTimeProfilerResults& results);
  /// Writes every iteration's measurements as CSV with ignite's columns: epoch, iteration,
  /// processing_stats, dataflow_stats, Event_STARTED, Event_COMPLETED, Event_EPOCH_STARTED,
  /// Event_EPOCH_COMPLETED, Event_ITERATION_STARTED, Event_ITERATION_COMPLETED,
  /// Event_GET_BATCH_STARTED, Event_GET_BATCH_COMPLETED; one row per iteration that started,
  /// the run's and the epoch's values repeated on each of their rows, an empty cell for what
  /// was not measured (yet). The file is replaced at once (written beside it, then renamed):
  /// never left half-written. Creates missing parent folders. Throws kindling::Error naming
  /// the path and the system's reason when it cannot be written. Local: every rank calling
  /// it writes its own measurements.
  void write_results(const std::string& path) const;

  /// EventObserver: called by the engine.
  void before_event(engine::Engine& engine, const engine::Event& event) override;
  void after_event(engine::Engine& engine, const engine::Event& event) override;
  void handler_called(engine::Engine& engine, const engine::Event& event, const engine::HandlerInfo& handler,
                      double seconds) override;

 private:
  // One iteration's measurements (NaN: not measured); the columns of the CSV file.
  struct Iteration {
    int64_t epoch = 0;
    int64_t iteration = 0;
    double processing, dataflow, get_batch_started, get_batch_completed, iteration_started, iteration_completed;
    Iteration();
  };
  struct Epoch {
    int64_t epoch = 0;
    double started, completed;
    Epoch();
  };
  struct Names {
    std::vector<int64_t> ids;
    std::vector<std::string> names;
  };
  Iteration& iteration_row(int64_t iteration, int64_t epoch);
  Epoch& epoch_row(int64_t epoch);
  void reset();

  const void* engine_id_ = nullptr;
  std::vector<Iteration> iterations_;
  std::vector<Epoch> epochs_;
  std::vector<double> started_, completed_;
  std::vector<Names> names_;  // per reported event, in BasicTimeProfilerResults' order
  std::unique_ptr<profiler_detail::FiringClock> clock_;
};

}  // namespace handlers
}  // namespace kindling
