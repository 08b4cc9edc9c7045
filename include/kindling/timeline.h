#pragma once
/// \file
/// The timeline's recorder: what a rank did, when, as spans of the steady clock on a few lanes
/// (the engine's iterations and handlers, a training step's parts, each collective). Off unless
/// a timeline records (kindling::handlers::Timeline turns it on for a range of iterations and
/// writes the spans as a Chrome trace); while off, a span costs one atomic load.
///
/// \code
///   {
///     kindling::timeline::Span span("augment", kindling::timeline::Lane::kStep);
///     batch = augment(batch);
///   }  // recorded from construction to here, when a timeline records
/// \endcode
///
/// kindling records its own spans: the supervised trainer's zero_grad, forward, loss, backward
/// and optimizer step; DDP's wait for its buckets and the write back of the averages; every
/// collective of kindling::dist (the flight recorder's view, with bytes and sequence number);
/// checkpoint writes. The Timeline handler adds the engine's iterations, data waits, event
/// firings and each handler by name.
///
/// Threads and ranks: any thread may record (a collective that completes on the engine's own
/// thread records from there); local to the process, nothing communicates.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace timeline {

/// The row of a rank's timeline an event belongs on. Spans of one lane and thread nest (an
/// event inside another lies wholly within it), except on kCommunication, whose operations
/// overlap (asynchronous buckets) and are spread over as many rows as needed when written.
enum class Lane : int {
  kEngine = 0,         // iterations, data waits, event firings, handlers, checkpoint writes
  kStep = 1,           // the parts of a training step (forward, backward, optimizer, ...)
  kCommunication = 2,  // collectives
};

/// One recorded span.
struct KINDLING_API TimelineEvent {
  std::string name;
  Lane lane = Lane::kStep;
  /// std::chrono::steady_clock, nanoseconds since its epoch, this process's clock.
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  /// Shown with the event: values as text and as numbers.
  std::vector<std::pair<std::string, std::string>> text_args;
  std::vector<std::pair<std::string, double>> number_args;
};

namespace detail {
KINDLING_API extern std::atomic<bool> g_recording;
}  // namespace detail

/// Whether a timeline records now (one relaxed atomic load). Any thread; does not throw.
inline bool recording() noexcept { return detail::g_recording.load(std::memory_order_relaxed); }

/// std::chrono::steady_clock now, in nanoseconds since its epoch. Does not throw.
KINDLING_API int64_t now_ns() noexcept;

/// Adds `event` when a timeline records; dropped otherwise, and once the recorder holds
/// max_events (counted in dropped_events()). Any thread; never throws (a failed allocation
/// drops the event).
KINDLING_API void record(TimelineEvent event) noexcept;

/// Records a span named `name` on `lane` from construction to destruction, when a timeline
/// records at construction (else nothing, for one atomic load). `name` must outlive the span
/// (a string literal). Does not throw.
class KINDLING_API Span {
 public:
  Span(const char* name, Lane lane) noexcept : name_(name), lane_(lane), start_ns_(recording() ? now_ns() : -1) {}
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  Lane lane_;
  int64_t start_ns_;
};

/// Starts recording into an empty buffer of at most `max_events` events (the events of an
/// earlier recording are dropped). Local to this process; does not throw.
KINDLING_API void start_recording(std::size_t max_events = 1000000);

/// Stops recording and returns the events recorded since start_recording, by start time.
/// Local to this process; throws std::bad_alloc only.
KINDLING_API std::vector<TimelineEvent> stop_recording();

/// Events the last (or current) recording dropped because it was full. Does not throw.
KINDLING_API std::size_t dropped_events() noexcept;

}  // namespace timeline
}  // namespace kindling
