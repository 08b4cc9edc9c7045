// The time profilers' shared parts: the clock that follows an engine's firings, ignite's
// statistics cells, the text table and the CSV file written at once.
#include "handlers/profilers/time_profiler_detail.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/files.h"
#include "kindling/engine/events.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {
namespace profiler_detail {

namespace {

std::string fixed5(double seconds) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.5f", seconds);
  return text;
}

double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

void FiringClock::reset() {
  open_.clear();
  batch_open_ = process_open_ = false;
}

double FiringClock::begin(const engine::Event& event) {
  const Clock::time_point now = Clock::now();
  double span = kNotMeasured;
  if (event.same_event(engine::Events::GET_BATCH_COMPLETED) && batch_open_) {
    span = seconds_between(batch_from_, now);
    batch_open_ = false;
  } else if (event.same_event(engine::Events::ITERATION_COMPLETED) && process_open_) {
    span = seconds_between(process_from_, now);
    process_open_ = false;
  }
  open_.emplace_back(event.id(), now);
  return span;
}

double FiringClock::end(const engine::Event& event) {
  const Clock::time_point now = Clock::now();
  if (event.same_event(engine::Events::GET_BATCH_STARTED)) {
    batch_from_ = now;
    batch_open_ = true;
  } else if (event.same_event(engine::Events::ITERATION_STARTED)) {
    process_from_ = now;
    process_open_ = true;
  }
  // The innermost open firing of this event; those begun after it never ended (a handler threw).
  for (std::size_t i = open_.size(); i-- > 0;) {
    if (open_[i].first != event.id()) continue;
    const double seconds = seconds_between(open_[i].second, now);
    open_.resize(i);
    return seconds;
  }
  return kNotMeasured;
}

void attach_profiler(engine::Engine& engine, std::shared_ptr<engine::EventObserver> observer, const void*& attached,
                     const std::string& who) {
  KINDLING_CHECK(attached == nullptr, who,
                 ".attach: this profiler is already attached to an engine; make one profiler per engine");
  engine.add_observer(std::move(observer));
  attached = engine.id();
}

void detach_profiler(engine::Engine& engine, const engine::EventObserver& observer, const void*& attached,
                     const std::string& who) {
  KINDLING_CHECK(attached == engine.id() && engine.remove_observer(observer), who,
                 ".detach: this profiler is not attached to engine '", engine.name, "'");
  attached = nullptr;
}

std::vector<double> measured(const std::vector<double>& values) {
  std::vector<double> out;
  out.reserve(values.size());
  for (double v : values) {
    if (!std::isnan(v)) out.push_back(v);
  }
  return out;
}

std::vector<std::string> stats_cells(const TimeStats& s) {
  if (s.count == 0) return {"not triggered", "", "", "", ""};
  return {fixed5(s.total), fixed5(s.min) + "/" + std::to_string(s.min_index),
          fixed5(s.max) + "/" + std::to_string(s.max_index), fixed5(s.mean),
          std::isnan(s.std_dev) ? std::string("None") : fixed5(s.std_dev)};
}

std::string text_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                       const std::vector<bool>& left_aligned) {
  std::vector<std::size_t> width(header.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  };
  widen(header);
  for (const auto& row : rows) widen(row);
  std::string rule;
  for (std::size_t c = 0; c < width.size(); ++c) rule += (c ? "  " : "") + std::string(width[c], '-');
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      const std::string pad(width[c] - cell.size(), ' ');
      const bool left = c < left_aligned.size() && left_aligned[c];
      out += (c ? "  " : "") + (left ? cell + pad : pad + cell);
    }
    out.erase(out.find_last_not_of(' ') + 1);
    return out + "\n";
  };
  std::string out = rule + "\n" + line(header) + rule + "\n";
  for (const auto& row : rows) out += row.empty() ? rule + "\n" : line(row);
  return out + rule + "\n";
}

std::string csv_seconds(double seconds) {
  if (std::isnan(seconds)) return "";
  char text[64];
  std::snprintf(text, sizeof(text), "%.9f", seconds);
  return text;
}

std::string csv_text(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void write_file_at_once(const std::string& path, const std::string& text, const std::string& who) {
  const std::string parent = ::kindling::detail::parent_directory(path);
  if (!parent.empty()) ::kindling::detail::make_directories(parent, who);
  const std::string temp = path + ".partial-" + std::to_string(::getpid());
  ::kindling::detail::replace_file(path, temp, text.data(), text.size(), who);
}

}  // namespace profiler_detail
}  // namespace handlers
}  // namespace kindling
