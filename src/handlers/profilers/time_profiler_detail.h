#pragma once
// Internal to the time profilers (time_profiler.cpp, handlers_time_profiler.cpp): the clock
// that follows an engine's firings, and the text table and CSV file both profilers write.
#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/events.h"
#include "kindling/engine/observer.h"
#include "kindling/handlers/profilers/time_profiler.h"

namespace kindling {
namespace handlers {
namespace profiler_detail {

// A value not measured (yet): a cell left empty, a measurement left out of the statistics.
constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

// Follows one engine's firings through the observer's calls: how long each firing's handlers
// took, how long the data took to give a batch, how long the process function ran.
class FiringClock {
 public:
  // Forgets the firings begun (at STARTED: a new run).
  void reset();
  // At before_event. Starts timing this firing, and returns the dataflow time (seconds) when
  // `event` is GET_BATCH_COMPLETED, the processing time when it is ITERATION_COMPLETED, else
  // kNotMeasured (also when the start of that span was not seen).
  double begin(const engine::Event& event);
  // At after_event: the seconds this firing's handlers took; kNotMeasured when its begin()
  // was not seen (the profiler was attached during the firing). Firings begun inside it and
  // never ended (a handler threw) are dropped.
  double end(const engine::Event& event);

 private:
  using Clock = std::chrono::steady_clock;
  std::vector<std::pair<int, Clock::time_point>> open_;  // (event id, start), innermost last
  Clock::time_point batch_from_, process_from_;
  bool batch_open_ = false, process_open_ = false;
};

// A profiler's attach(): adds `observer` to `engine` and records the engine in `attached`.
// Throws kindling::UsageError (naming `who`) when `attached` already holds an engine.
void attach_profiler(engine::Engine& engine, std::shared_ptr<engine::EventObserver> observer, const void*& attached,
                     const std::string& who);
// A profiler's detach(): removes `observer` from `engine`. Throws kindling::UsageError
// (naming `who`) when it is not attached to that engine.
void detach_profiler(engine::Engine& engine, const engine::EventObserver& observer, const void*& attached,
                     const std::string& who);

// The measured values of `values` (without kNotMeasured), in order.
std::vector<double> measured(const std::vector<double>& values);

// ignite's cells for `stats`: total, "min/index", "max/index", mean, std (5 decimals);
// "not triggered" and empty cells when nothing was measured, "None" for the std of one value.
std::vector<std::string> stats_cells(const TimeStats& stats);

// A text table: columns as wide as their widest cell, two spaces apart, left-aligned where
// `left_aligned` says so (right-aligned otherwise). An empty row stands for a rule of dashes.
std::string text_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                       const std::vector<bool>& left_aligned);

// A CSV cell: seconds with 9 decimals (nanoseconds); empty for kNotMeasured.
std::string csv_seconds(double seconds);
// A CSV cell for text: quoted (quotes doubled) when it holds a comma, a quote or a line break.
std::string csv_text(const std::string& text);
// Replaces `path` by `text` at once (written beside it, then renamed), creating missing
// parent folders. Throws kindling::Error naming the path and the reason; `who` starts it.
void write_file_at_once(const std::string& path, const std::string& text, const std::string& who);

}  // namespace profiler_detail
}  // namespace handlers
}  // namespace kindling
