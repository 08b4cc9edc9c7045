#pragma once
/// \file
/// EventObserver: a watcher of an Engine's event firings and handler calls, for tools that
/// measure the engine without being handlers themselves (kindling's BasicTimeProfiler and
/// HandlersTimeProfiler). An observer sees every firing of every event, whether the event
/// has handlers or not, and the duration of each handler call.
///
/// \code
///   struct CountCalls : kindling::engine::EventObserver {
///     void before_event(Engine&, const Event&) override {}
///     void after_event(Engine&, const Event&) override {}
///     void handler_called(Engine&, const Event& e, const HandlerInfo& h, double seconds) override {
///       std::cout << kindling::engine::handler_name(h) << " took " << seconds << " s\n";
///     }
///   };
///   trainer.add_observer(std::make_shared<CountCalls>());
/// \endcode
///
/// Cost: an engine without observers pays one test of an empty list per event fired. With
/// observers, each handler call is timed (two reads of std::chrono::steady_clock).
///
/// Order of the calls for one firing: before_event; for each handler whose filter lets the
/// event through, the handler, then handler_called; after_event. When a handler throws,
/// after_event is not called for that firing (the exception leaves the firing as it would
/// without observers). Observers added or removed while an event fires take effect at the
/// next firing.
///
/// Threads and ranks: called on the engine's thread, local to the process; nothing here
/// communicates.

#include <cstddef>
#include <cstdint>
#include <string>
#include <typeinfo>

#include "kindling/engine/events.h"
#include "kindling/export.h"

namespace kindling {
namespace engine {

class Engine;

/// Which handler handler_called reports.
struct KINDLING_API HandlerInfo {
  /// The registration: one id per add_event_handler / on call (shared by all of its events).
  int64_t id = -1;
  /// 1-based position of the handler among the handlers of the event fired (attach order).
  std::size_t position = 0;
  /// The C++ type of the callable given to add_event_handler (null for a function pointer
  /// or a std::function, whose type says nothing about what they are).
  const std::type_info* type = nullptr;
  /// The event as the handler was attached, with its filter (e.g. ITERATION_COMPLETED(every=10));
  /// valid during the handler_called call only.
  const Event* attached_as = nullptr;
  /// When the call began and ended: std::chrono::steady_clock's nanoseconds since its epoch
  /// (the clock of `seconds` and of kindling's timeline), so that a span drawn from them holds
  /// exactly what the handler did (a span ending at the time an observer reads would come
  /// later by the time between the two reads, and could cross a span it holds).
  int64_t started_ns = -1, ended_ns = -1;
};

/// A printable name for a handler, as ignite names a handler by its function's __qualname__:
/// the callable's type, demangled, without argument and template lists (a lambda in
/// `train()` is "train::{lambda#1}"; one in kindling::handlers::Timer::attach is
/// "kindling::handlers::Timer::attach::{lambda#1}"; a function object of class LogLoss is
/// "LogLoss"); for a function pointer or a std::function, "handler #<position> of <EVENT>".
/// Give a handler a readable name by making it a named function object. Does not throw.
KINDLING_API std::string handler_name(const HandlerInfo& handler);

/// Base of observers; see the file comment. Attach with Engine::add_observer.
class KINDLING_API EventObserver {
 public:
  virtual ~EventObserver() = default;
  /// The engine is about to run the handlers of `event` (the event without filter).
  virtual void before_event(Engine& engine, const Event& event) = 0;
  /// The handlers of `event` have all run.
  virtual void after_event(Engine& engine, const Event& event) = 0;
  /// One handler of `event` returned after `seconds` (wall time, steady clock).
  virtual void handler_called(Engine& engine, const Event& event, const HandlerInfo& handler, double seconds) = 0;
};

}  // namespace engine
}  // namespace kindling
