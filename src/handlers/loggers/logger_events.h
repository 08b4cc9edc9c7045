#pragma once
// Internal to kindling's loggers (TensorBoard, JSON lines): which of a handler's events is
// firing, and the check that each event has a counter to take the step from. Defined in
// tensorboard.cpp; the parameter handlers (tensorboard_params.cpp) use them too.
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/events.h"

namespace kindling {
namespace handlers {
namespace detail {

/// The event being fired among `events`: a handler is given only the engine, which set
/// last_event() just before calling its handlers. Does not throw.
const engine::Event& firing_event(const engine::Engine& engine, const std::vector<engine::Event>& events);
/// Throws kindling::UsageError (`where` first) when `tag` is not UTF-8. Called on every rank
/// (before the inert ranks return), so that a bad tag stops every rank alike.
void check_utf8_tag(const std::string& tag, const std::string& where);
/// Throws kindling::UsageError (`where` first, `hint` last) when `events` is empty or holds an
/// event without a counter (TERMINATE, ...).
void check_counters(const engine::EventsList& events, const std::string& where, const char* hint);

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
