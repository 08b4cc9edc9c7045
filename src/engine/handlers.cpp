// Engine's event handlers: adding, removing, registering user-defined events, firing.
#include "engine/registry.h"
#include "kindling/error.h"

namespace kindling {
namespace engine {

void HandlerHandle::remove() {
  auto registry = std::static_pointer_cast<Engine::Registry>(registry_.lock());
  KINDLING_CHECK(registry && registry->remove(id_),
                 "kindling::engine::HandlerHandle::remove: the handler is not attached (already removed, or its "
                 "engine is gone)");
}

bool HandlerHandle::attached() const {
  auto registry = std::static_pointer_cast<Engine::Registry>(registry_.lock());
  return registry && registry->has(id_);
}

HandlerHandle Engine::add_handler(const EventsList& events, detail::Handler handler) {
  KINDLING_CHECK(!events.events().empty(), "kindling::engine::Engine::add_event_handler: no event given");
  for (const Event& e : events.events()) {
    KINDLING_CHECK(e.counter() != EventCounter::kOwn || registry_->registered_custom.count(e.id()) > 0,
                   "kindling::engine::", name, ".add_event_handler: event ", e.name(),
                   " is not registered with this engine; call register_events({", e.name(), "}) first");
    KINDLING_CHECK(!handler.wants_exception || e.same_event(Events::EXCEPTION_RAISED), "kindling::engine::", name,
                   ".add_event_handler: a handler taking (Engine&, std::exception_ptr) can only handle "
                   "EXCEPTION_RAISED, not ",
                   e.name());
  }
  HandlerHandle handle;
  handle.registry_ = registry_;
  handle.id_ = registry_->next_id++;
  for (const Event& e : events.events()) registry_->add(e, {handle.id_, e, handler});
  return handle;
}

bool Engine::has_event_handler(const Event& event) const {
  auto it = registry_->by_event.find(event.id());
  if (it == registry_->by_event.end()) return false;
  return !it->second->empty();
}

bool Engine::has_event_handler(const HandlerHandle& handle) const {
  return handle.registry_.lock() == registry_ && registry_->has(handle.id_);
}

void Engine::remove_event_handler(const HandlerHandle& handle) {
  KINDLING_CHECK(handle.registry_.lock() == registry_ && registry_->remove(handle.id_), "kindling::engine::", name,
                 ".remove_event_handler: this handler is not attached to this engine");
}

void Engine::register_events(const std::vector<Event>& events) {
  for (const Event& e : events) {
    KINDLING_CHECK(e.counter() == EventCounter::kOwn, "kindling::engine::", name, ".register_events: ", e.name(),
                   " is a built-in event; only events made with Event::custom() are registered");
    registry_->registered_custom.insert(e.id());
    state_.custom_counts.emplace(e.id(), 0);
  }
}

void Engine::fire_event(const Event& event) {
  if (event.counter() == EventCounter::kOwn) {
    KINDLING_CHECK(registry_->registered_custom.count(event.id()) > 0, "kindling::engine::", name,
                   ".fire_event: ", event.name(), " is not registered with this engine; call register_events({",
                   event.name(), "}) first");
    ++state_.custom_counts[event.id()];
  }
  fire(event);
}

void Engine::fire(const Event& event) {
  last_event_ = event;
  auto it = registry_->by_event.find(event.id());
  if (it == registry_->by_event.end()) return;
  const int64_t counter = state_.counter(event);
  // The list this firing started with (see Registry), by index: it may grow meanwhile.
  const Registry::List entries = it->second;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    if (!(*entries)[i].event.passes(*this, counter)) continue;
    auto call = (*entries)[i].handler.call;  // copy: the vector may grow during the call
    call(*this, exception_);
  }
}

}  // namespace engine
}  // namespace kindling
