// Engine's event handlers: adding, removing, registering user-defined events, firing.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

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

void Engine::add_observer(std::shared_ptr<EventObserver> observer) {
  KINDLING_CHECK(observer != nullptr, "kindling::engine::", name, ".add_observer: the observer is null");
  auto& all = registry_->observers;
  KINDLING_CHECK(std::find(all.begin(), all.end(), observer) == all.end(), "kindling::engine::", name,
                 ".add_observer: this observer is already added to this engine; add it once");
  // A copy, not an append: a firing in progress keeps iterating over the list it started with.
  auto copy = all;
  copy.push_back(std::move(observer));
  all = std::move(copy);
}

bool Engine::remove_observer(const EventObserver& observer) {
  auto copy = registry_->observers;
  auto it = std::find_if(copy.begin(), copy.end(), [&](const auto& o) { return o.get() == &observer; });
  if (it == copy.end()) return false;
  copy.erase(it);
  registry_->observers = std::move(copy);
  return true;
}

void Engine::fire(const Event& event) {
  last_event_ = event;
  // Observers (profilers) are rare: without them a firing costs what it did before.
  std::vector<std::shared_ptr<EventObserver>> observers;
  if (!registry_->observers.empty()) observers = registry_->observers;
  for (const auto& o : observers) o->before_event(*this, event);
  auto it = registry_->by_event.find(event.id());
  if (it != registry_->by_event.end()) {
    const int64_t counter = state_.counter(event);
    // The list this firing started with (see Registry), by index: it may grow meanwhile.
    const Registry::List entries = it->second;
    for (std::size_t i = 0; i < entries->size(); ++i) {
      if (!(*entries)[i].event.passes(*this, counter)) continue;
      auto call = (*entries)[i].handler.call;  // copy: the vector may grow during the call
      if (observers.empty()) {
        call(*this, exception_);
        continue;
      }
      const auto start = std::chrono::steady_clock::now();
      call(*this, exception_);
      const auto end = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(end - start).count();
      const Registry::Entry& entry = (*entries)[i];  // index i stays valid: lists only grow at the end
      const auto ns = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
      };
      const HandlerInfo info{entry.id, i + 1, entry.handler.type, &entry.event, ns(start), ns(end)};
      for (const auto& o : observers) o->handler_called(*this, event, info, seconds);
    }
  }
  for (const auto& o : observers) o->after_event(*this, event);
}

}  // namespace engine
}  // namespace kindling
