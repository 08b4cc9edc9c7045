#pragma once
/// \file
/// Events of kindling::engine::Engine and their filters, as ignite's `Events`:
///
/// \code
///   engine.on(Events::STARTED, [](Engine& e) { ... });
///   engine.on(Events::ITERATION_COMPLETED.every(100), log_loss);
///   engine.on(Events::EPOCH_COMPLETED.once({2, 5}), snapshot);
///   engine.on(Events::ITERATION_STARTED.every(10).after(50).before(200), probe);
///   engine.on(Events::EPOCH_COMPLETED.filter([](const Engine&, int64_t epoch) { return epoch > 3; }), h);
///   engine.on(Events::COMPLETED | Events::EPOCH_COMPLETED.every(5), evaluate);
///   const Event BACKWARD_DONE = Event::custom("BACKWARD_DONE");   // a user-defined event
///   engine.register_events({BACKWARD_DONE});  engine.fire_event(BACKWARD_DONE);
/// \endcode
///
/// A filter looks at the event's counter: State::iteration for GET_BATCH_* and ITERATION_*,
/// State::epoch for STARTED, EPOCH_* and COMPLETED, and for a user-defined event the number
/// of times the engine has fired it. Events and filters are plain values: local, any rank.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace engine {

class Engine;
class EventsList;

/// Which counter an event's filters count with.
enum class EventCounter {
  kIteration,  // State::iteration
  kEpoch,      // State::epoch
  kOwn,        // how many times the engine fired this (user-defined) event
  kNone,       // TERMINATE, EXCEPTION_RAISED, ...: fired at most once per run; no filters
};

/// One event, possibly with a filter. Copyable value; the filter is shared between copies.
class KINDLING_API Event {
 public:
  /// A user-defined event named `name` (ignite's EventEnum member): register it with
  /// Engine::register_events before adding handlers or firing it. Each call makes a new,
  /// distinct event, even for the same name. Throws kindling::UsageError for an empty name.
  static Event custom(const std::string& name);

  /// Fires when the counter is a multiple of `n` (n >= 1; every(1) is every time).
  /// Combines with before/after: fires when after < counter < before and
  /// (counter - after - 1) % n == 0. Throws kindling::UsageError for n < 1, when this event
  /// already has a once() or filter() filter, or has no counter.
  Event every(int64_t n) const;
  /// Fires only when the counter equals `n` (n >= 1). Throws kindling::UsageError for
  /// n < 1, when another filter is set, or when the event has no counter.
  Event once(int64_t n) const;
  /// Fires when the counter is one of `ns` (non-empty, each >= 1). Throws as once(n).
  Event once(std::vector<int64_t> ns) const;
  Event once(std::initializer_list<int64_t> ns) const { return once(std::vector<int64_t>(ns)); }
  /// Fires only while the counter is below `n` (exclusive, n >= 0). Combines with every
  /// and after. Throws kindling::UsageError for n < 0 or with once()/filter().
  Event before(int64_t n) const;
  /// Fires only when the counter is above `n` (exclusive, n >= 0). Combines as before().
  Event after(int64_t n) const;
  /// Fires when predicate(engine, counter) is true; the engine is the one firing the event.
  /// Throws kindling::UsageError for an empty predicate or when another filter is set.
  Event filter(std::function<bool(const Engine&, int64_t)> predicate) const;

  const std::string& name() const { return *name_; }
  int id() const { return id_; }
  EventCounter counter() const { return counter_; }
  bool has_filter() const { return filter_ != nullptr; }
  /// The filter's identity (null without one; copies of one filtered event share it), to order
  /// events in containers consistently with ==.
  const void* filter_key() const { return filter_.get(); }
  /// Whether the filter lets the event through at this counter value (true without one).
  bool passes(const Engine& engine, int64_t counter) const;
  /// "ITERATION_COMPLETED(every=100)" etc., for logs and errors.
  std::string to_string() const;

  /// The same event (id), whatever the filters.
  bool same_event(const Event& other) const { return id_ == other.id_; }
  /// Same event and same filter (copies of one filtered event compare equal).
  bool operator==(const Event& other) const { return id_ == other.id_ && filter_ == other.filter_; }
  bool operator!=(const Event& other) const { return !(*this == other); }

  /// Internal: the built-in events' constructor (see Events).
  Event(int id, const char* name, EventCounter counter);

 private:
  struct Filter;
  Event with(std::shared_ptr<const Filter> filter) const;

  int id_;
  std::shared_ptr<const std::string> name_;
  EventCounter counter_;
  std::shared_ptr<const Filter> filter_;
};

/// Several events, for one handler on each (`A | B`). Implicit from one Event.
class KINDLING_API EventsList {
 public:
  EventsList(const Event& event) : events_{event} {}  // NOLINT: implicit on purpose
  EventsList(std::vector<Event> events) : events_(std::move(events)) {}
  /// Appends an event.
  void add(const Event& event) { events_.push_back(event); }
  const std::vector<Event>& events() const { return events_; }

 private:
  std::vector<Event> events_;
};

inline EventsList operator|(const Event& a, const Event& b) { return EventsList(std::vector<Event>{a, b}); }
inline EventsList operator|(EventsList a, const Event& b) {
  a.add(b);
  return a;
}

/// The engine's built-in events (ignite's names). See Engine for when each fires.
struct KINDLING_API Events {
  static const Event STARTED;
  static const Event EPOCH_STARTED;
  static const Event GET_BATCH_STARTED;
  static const Event GET_BATCH_COMPLETED;
  static const Event ITERATION_STARTED;
  static const Event ITERATION_COMPLETED;
  static const Event DATALOADER_STOP_ITERATION;
  static const Event EXCEPTION_RAISED;
  static const Event TERMINATE_SINGLE_EPOCH;
  static const Event EPOCH_COMPLETED;
  static const Event TERMINATE;
  static const Event COMPLETED;
  static const Event INTERRUPT;
};

}  // namespace engine
}  // namespace kindling
