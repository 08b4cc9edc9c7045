// HandlersTimeProfiler: every handler's calls timed through the engine's observer calls, with
// the dataflow and processing times; ignite's table and CSV columns.
#include "kindling/handlers/profilers/handlers_time_profiler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "handlers/profilers/time_profiler_detail.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

namespace {
constexpr const char* kHandlersProfilerWho = "kindling::handlers::HandlersTimeProfiler";
}  // namespace

HandlersTimeProfiler::HandlersTimeProfiler() : clock_(std::make_unique<profiler_detail::FiringClock>()) {}

HandlersTimeProfiler::~HandlersTimeProfiler() = default;

void HandlersTimeProfiler::attach(engine::Engine& engine) {
  profiler_detail::attach_profiler(engine, engine::keep_alive(*this, kHandlersProfilerWho), engine_id_,
                                   kHandlersProfilerWho);
}

void HandlersTimeProfiler::detach(engine::Engine& engine) {
  profiler_detail::detach_profiler(engine, *this, engine_id_, kHandlersProfilerWho);
}

void HandlersTimeProfiler::before_event(engine::Engine&, const engine::Event& event) {
  if (event.same_event(engine::Events::STARTED)) {
    series_.clear();
    processing_.clear();
    dataflow_.clear();
    clock_->reset();
  }
  const double span = clock_->begin(event);
  if (std::isnan(span)) return;
  if (event.same_event(engine::Events::GET_BATCH_COMPLETED)) dataflow_.push_back(span);
  if (event.same_event(engine::Events::ITERATION_COMPLETED)) processing_.push_back(span);
}

void HandlersTimeProfiler::after_event(engine::Engine&, const engine::Event& event) { clock_->end(event); }

void HandlersTimeProfiler::handler_called(engine::Engine&, const engine::Event& event,
                                          const engine::HandlerInfo& handler, double seconds) {
  Series& s = series_[{event.id(), handler.id}];
  if (s.handler.empty()) {
    s.handler = engine::handler_name(handler);
    s.event = event.name();
  }
  s.seconds.push_back(seconds);
}

HandlersTimeProfilerResults HandlersTimeProfiler::get_results() const {
  HandlersTimeProfilerResults r;
  for (const auto& kv : series_) {
    r.handlers.push_back({kv.second.handler, kv.second.event, TimeStats::of(kv.second.seconds)});
    r.total += r.handlers.back().stats.total;
  }
  r.processing_stats = TimeStats::of(processing_);
  r.dataflow_stats = TimeStats::of(dataflow_);
  return r;
}

std::string HandlersTimeProfiler::print_results(const HandlersTimeProfilerResults& results) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& h : results.handlers) {
    std::vector<std::string> cells{h.handler, h.event, std::to_string(h.stats.count)};
    for (auto& c : profiler_detail::stats_cells(h.stats)) cells.push_back(c);
    rows.push_back(cells);
  }
  rows.push_back({});
  std::ostringstream total;
  total.precision(5);
  total << std::fixed << results.total;
  rows.push_back({"Total", "", "", total.str()});
  std::string text = "Handlers' time (in seconds, this process only):\n" +
                     profiler_detail::text_table({"Handler", "Event Name", "Count", "Total(s)", "Min(s)/IDX",
                                                  "Max(s)/IDX", "Mean(s)", "Std(s)"},
                                                 rows, {true, true});
  for (const auto& [what, s] :
       {std::make_pair("Processing", results.processing_stats), std::make_pair("Dataflow", results.dataflow_stats)}) {
    const std::vector<std::string> c = profiler_detail::stats_cells(s);
    if (s.count == 0) {
      text += std::string(what) + " not triggered\n";
      continue;
    }
    text += std::string(what) + " took total " + c[0] + "s [min/index: " + c[1] + ", max/index: " + c[2] +
            ", mean: " + c[3] + "s, std: " + c[4] + "s]\n";
  }
  log(LogLevel::kInfo, text);
  return text;
}

void HandlersTimeProfiler::write_results(const std::string& path) const {
  std::vector<std::string> header{"#", "processing_stats", "dataflow_stats"};
  std::vector<const std::vector<double>*> columns{&processing_, &dataflow_};
  for (const auto& kv : series_) {
    header.push_back(profiler_detail::csv_text(kv.second.handler + " (" + kv.second.event + ")"));
    columns.push_back(&kv.second.seconds);
  }
  std::size_t rows = 0;
  for (const auto* c : columns) rows = std::max(rows, c->size());
  std::string text;
  for (const auto& h : header) text += h + ",";
  text.back() = '\n';
  for (std::size_t k = 0; k < rows; ++k) {
    text += std::to_string(k + 1);
    for (const auto* c : columns) {
      text += ',';
      if (k < c->size()) text += profiler_detail::csv_seconds((*c)[k]);
    }
    text += "\n";
  }
  profiler_detail::write_file_at_once(path, text, std::string(kHandlersProfilerWho) + ".write_results");
}

}  // namespace handlers
}  // namespace kindling
