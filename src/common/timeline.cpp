// The timeline's recorder (kindling/timeline.h): one buffer per process under a mutex. Spans
// come a few dozen per training step, so a lock per event costs nothing next to the step; a
// lock-free ring would save nothing measurable (docs/performance.md, the timeline's cost).
#include "kindling/timeline.h"

#include <algorithm>
#include <chrono>
#include <mutex>

namespace kindling {
namespace timeline {
namespace detail {
std::atomic<bool> g_recording{false};
}  // namespace detail

namespace {

struct Recorder {
  std::mutex mu;
  std::vector<TimelineEvent> events;
  std::size_t max_events = 0;
  std::size_t dropped = 0;
};

Recorder& recorder() {
  static Recorder* r = new Recorder();  // never destroyed: collectives may complete on threads during exit
  return *r;
}

}  // namespace

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record(TimelineEvent event) noexcept {
  if (!recording()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!recording()) return;  // stopped meanwhile
  if (r.events.size() >= r.max_events) {
    ++r.dropped;
    return;
  }
  try {
    r.events.push_back(std::move(event));
  } catch (...) {  // no memory: the event is lost, never the caller's work
    ++r.dropped;
  }
}

Span::~Span() {
  if (start_ns_ < 0) return;
  try {
    TimelineEvent e;
    e.name = name_;
    e.lane = lane_;
    e.start_ns = start_ns_;
    e.end_ns = now_ns();
    record(std::move(e));
  } catch (...) {  // the name's copy failed: the span is lost
  }
}

void start_recording(std::size_t max_events) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.clear();
  r.max_events = max_events;
  r.dropped = 0;
  detail::g_recording.store(true);
}

std::vector<TimelineEvent> stop_recording() {
  std::vector<TimelineEvent> out;
  {
    Recorder& r = recorder();
    std::lock_guard<std::mutex> lock(r.mu);
    detail::g_recording.store(false);
    out.swap(r.events);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_ns < b.start_ns; });
  return out;
}

std::size_t dropped_events() noexcept {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.dropped;
}

}  // namespace timeline
}  // namespace kindling
