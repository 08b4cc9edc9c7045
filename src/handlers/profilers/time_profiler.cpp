// BasicTimeProfiler: per-iteration dataflow, processing and per-event handler times from the
// engine's observer calls; ignite's statistics, a text table and a CSV file.
#include "kindling/handlers/profilers/time_profiler.h"

#include <cmath>
#include <sstream>

#include "handlers/profilers/time_profiler_detail.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

namespace {

constexpr const char* kBasicProfilerWho = "kindling::handlers::BasicTimeProfiler";

// ignite's events, in the order of its report.
const std::vector<engine::Event>& profiled_events() {
  static const std::vector<engine::Event> events{
      engine::Events::STARTED,           engine::Events::EPOCH_STARTED,
      engine::Events::ITERATION_STARTED, engine::Events::ITERATION_COMPLETED,
      engine::Events::EPOCH_COMPLETED,   engine::Events::COMPLETED,
      engine::Events::GET_BATCH_STARTED, engine::Events::GET_BATCH_COMPLETED};
  return events;
}

// Positions in profiled_events().
enum class ProfiledEvent {
  kStarted,
  kEpochStarted,
  kIterationStarted,
  kIterationCompleted,
  kEpochCompleted,
  kCompleted,
  kGetBatchStarted,
  kGetBatchCompleted
};

// The position of `event` in profiled_events(), or -1.
int profiled_index(const engine::Event& event) {
  const auto& events = profiled_events();
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].same_event(event)) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

TimeStats TimeStats::of(const std::vector<double>& seconds) {
  TimeStats s;
  s.count = static_cast<int64_t>(seconds.size());
  if (seconds.empty()) return s;
  s.min = s.max = seconds[0];
  s.min_index = s.max_index = 0;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    s.total += seconds[i];
    if (seconds[i] < s.min) {
      s.min = seconds[i];
      s.min_index = static_cast<int64_t>(i);
    }
    if (seconds[i] > s.max) {
      s.max = seconds[i];
      s.max_index = static_cast<int64_t>(i);
    }
  }
  s.mean = s.total / static_cast<double>(s.count);
  if (s.count < 2) {
    s.std_dev = std::nan("");
    return s;
  }
  double squares = 0;
  for (double v : seconds) squares += (v - s.mean) * (v - s.mean);
  s.std_dev = std::sqrt(squares / static_cast<double>(s.count - 1));
  return s;
}

BasicTimeProfiler::Iteration::Iteration()
    : processing(profiler_detail::kNotMeasured),
      dataflow(profiler_detail::kNotMeasured),
      get_batch_started(profiler_detail::kNotMeasured),
      get_batch_completed(profiler_detail::kNotMeasured),
      iteration_started(profiler_detail::kNotMeasured),
      iteration_completed(profiler_detail::kNotMeasured) {}

BasicTimeProfiler::Epoch::Epoch() : started(profiler_detail::kNotMeasured), completed(profiler_detail::kNotMeasured) {}

BasicTimeProfiler::BasicTimeProfiler()
    : names_(profiled_events().size()), clock_(std::make_unique<profiler_detail::FiringClock>()) {}

BasicTimeProfiler::~BasicTimeProfiler() = default;

void BasicTimeProfiler::attach(engine::Engine& engine) {
  profiler_detail::attach_profiler(engine, engine::keep_alive(*this, kBasicProfilerWho), engine_id_, kBasicProfilerWho);
}

void BasicTimeProfiler::detach(engine::Engine& engine) {
  profiler_detail::detach_profiler(engine, *this, engine_id_, kBasicProfilerWho);
}

void BasicTimeProfiler::reset() {
  iterations_.clear();
  epochs_.clear();
  started_.clear();
  completed_.clear();
  names_.assign(profiled_events().size(), Names());
  clock_->reset();
}

BasicTimeProfiler::Iteration& BasicTimeProfiler::iteration_row(int64_t iteration, int64_t epoch) {
  if (iterations_.empty() || iterations_.back().iteration != iteration) {
    iterations_.emplace_back();
    iterations_.back().iteration = iteration;
    iterations_.back().epoch = epoch;
  }
  return iterations_.back();
}

BasicTimeProfiler::Epoch& BasicTimeProfiler::epoch_row(int64_t epoch) {
  if (epochs_.empty() || epochs_.back().epoch != epoch) {
    epochs_.emplace_back();
    epochs_.back().epoch = epoch;
  }
  return epochs_.back();
}

void BasicTimeProfiler::before_event(engine::Engine& engine, const engine::Event& event) {
  if (event.same_event(engine::Events::STARTED)) reset();
  const double span = clock_->begin(event);
  if (std::isnan(span)) return;
  const engine::State& s = engine.state();
  if (event.same_event(engine::Events::GET_BATCH_COMPLETED)) iteration_row(s.iteration + 1, s.epoch).dataflow = span;
  if (event.same_event(engine::Events::ITERATION_COMPLETED)) iteration_row(s.iteration, s.epoch).processing = span;
}

void BasicTimeProfiler::after_event(engine::Engine& engine, const engine::Event& event) {
  const double seconds = clock_->end(event);
  if (std::isnan(seconds)) return;
  const engine::State& s = engine.state();
  // GET_BATCH_* fire before the iteration's counter goes up: the batch is for the next one.
  using P = ProfiledEvent;
  switch (static_cast<P>(profiled_index(event))) {
    case P::kStarted: started_.push_back(seconds); break;
    case P::kEpochStarted: epoch_row(s.epoch).started = seconds; break;
    case P::kIterationStarted: iteration_row(s.iteration, s.epoch).iteration_started = seconds; break;
    case P::kIterationCompleted: iteration_row(s.iteration, s.epoch).iteration_completed = seconds; break;
    case P::kEpochCompleted: epoch_row(s.epoch).completed = seconds; break;
    case P::kCompleted: completed_.push_back(seconds); break;
    case P::kGetBatchStarted: iteration_row(s.iteration + 1, s.epoch).get_batch_started = seconds; break;
    case P::kGetBatchCompleted: iteration_row(s.iteration + 1, s.epoch).get_batch_completed = seconds; break;
    default: break;
  }
}

void BasicTimeProfiler::handler_called(engine::Engine&, const engine::Event& event, const engine::HandlerInfo& handler,
                                       double) {
  const int index = profiled_index(event);
  if (index < 0) return;
  Names& names = names_[static_cast<std::size_t>(index)];
  for (int64_t id : names.ids) {
    if (id == handler.id) return;
  }
  names.ids.push_back(handler.id);
  names.names.push_back(engine::handler_name(handler));
}

BasicTimeProfilerResults BasicTimeProfiler::get_results() const {
  using profiler_detail::measured;
  auto column = [&](double Iteration::*field) {
    std::vector<double> out;
    for (const auto& row : iterations_) out.push_back(row.*field);
    return TimeStats::of(measured(out));
  };
  auto epoch_column = [&](double Epoch::*field) {
    std::vector<double> out;
    for (const auto& row : epochs_) out.push_back(row.*field);
    return TimeStats::of(measured(out));
  };
  BasicTimeProfilerResults r;
  r.processing_stats = column(&Iteration::processing);
  r.dataflow_stats = column(&Iteration::dataflow);
  const std::vector<TimeStats> per_event{TimeStats::of(started_),
                                         epoch_column(&Epoch::started),
                                         column(&Iteration::iteration_started),
                                         column(&Iteration::iteration_completed),
                                         epoch_column(&Epoch::completed),
                                         TimeStats::of(completed_),
                                         column(&Iteration::get_batch_started),
                                         column(&Iteration::get_batch_completed)};
  for (std::size_t i = 0; i < per_event.size(); ++i) {
    r.event_handlers_stats.push_back({profiled_events()[i].name(), per_event[i], names_[i].names});
    r.event_handlers_total += per_event[i].total;
  }
  return r;
}

std::string BasicTimeProfiler::print_results(const BasicTimeProfilerResults& results) {
  using profiler_detail::stats_cells;
  auto row = [](const std::string& item, const TimeStats& s, const std::string& handlers) {
    std::vector<std::string> cells{item, std::to_string(s.count)};
    for (auto& c : stats_cells(s)) cells.push_back(c);
    cells.push_back(handlers);
    return cells;
  };
  std::vector<std::vector<std::string>> rows{
      row("Processing function", results.processing_stats, ""), row("Dataflow", results.dataflow_stats, ""), {}};
  for (const auto& e : results.event_handlers_stats) {
    std::string names;
    for (const auto& n : e.handler_names) names += (names.empty() ? "" : ", ") + n;
    rows.push_back(row("- " + e.event, e.stats, "[" + names + "]"));
  }
  rows.push_back({});
  std::ostringstream total;
  total.precision(5);
  total << std::fixed << results.event_handlers_total;
  rows.push_back({"Event handlers, total", "", total.str()});
  const std::string text = "Time profiling stats (in seconds, this process only):\n" +
                           profiler_detail::text_table({"Item", "Count", "Total(s)", "Min(s)/IDX", "Max(s)/IDX",
                                                        "Mean(s)", "Std(s)", "Handlers"},
                                                       rows, {true, false, false, false, false, false, false, true});
  log(LogLevel::kInfo, text);
  return text;
}

void BasicTimeProfiler::write_results(const std::string& path) const {
  using profiler_detail::csv_seconds;
  std::string text =
      "epoch,iteration,processing_stats,dataflow_stats,Event_STARTED,Event_COMPLETED,Event_EPOCH_STARTED,"
      "Event_EPOCH_COMPLETED,Event_ITERATION_STARTED,Event_ITERATION_COMPLETED,Event_GET_BATCH_STARTED,"
      "Event_GET_BATCH_COMPLETED\n";
  const double started = started_.empty() ? profiler_detail::kNotMeasured : started_.back();
  const double completed = completed_.empty() ? profiler_detail::kNotMeasured : completed_.back();
  std::size_t e = 0;
  for (const auto& it : iterations_) {
    if (std::isnan(it.iteration_started) && std::isnan(it.processing)) continue;  // the batch never came
    while (e < epochs_.size() && epochs_[e].epoch < it.epoch) ++e;
    const bool has_epoch = e < epochs_.size() && epochs_[e].epoch == it.epoch;
    const double epoch_started = has_epoch ? epochs_[e].started : profiler_detail::kNotMeasured;
    const double epoch_completed = has_epoch ? epochs_[e].completed : profiler_detail::kNotMeasured;
    for (const std::string& cell :
         {std::to_string(it.epoch), std::to_string(it.iteration), csv_seconds(it.processing), csv_seconds(it.dataflow),
          csv_seconds(started), csv_seconds(completed), csv_seconds(epoch_started), csv_seconds(epoch_completed),
          csv_seconds(it.iteration_started), csv_seconds(it.iteration_completed), csv_seconds(it.get_batch_started),
          csv_seconds(it.get_batch_completed)}) {
      text += cell + ",";
    }
    text.back() = '\n';
  }
  profiler_detail::write_file_at_once(path, text, std::string(kBasicProfilerWho) + ".write_results");
}

}  // namespace handlers
}  // namespace kindling
