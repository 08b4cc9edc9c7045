#pragma once
// Internal: the handler registry of an Engine (shared with HandlerHandle, which outlives
// nothing: it holds a weak reference).
#include <algorithm>
#include <iterator>
#include <memory>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"

namespace kindling {
namespace engine {

// Lists are shared as Python lists are in ignite: a firing iterates over the list it
// started with; adding appends to the current list (so a handler added while its event
// fires runs in that firing, unless a removal replaced the list meanwhile); removing
// replaces the list with a copy without the handler (so a handler removed while its event
// fires still runs in that firing).
struct Engine::Registry {
  struct Entry {
    int64_t id;
    Event event;  // with its filter
    detail::Handler handler;
  };
  using List = std::shared_ptr<std::vector<Entry>>;
  std::map<int, List> by_event;  // event id -> entries in the order added
  std::set<int> registered_custom;
  int64_t next_id = 0;
  // Watchers of every firing (kindling/engine/observer.h); empty unless a profiler is attached.
  std::vector<std::shared_ptr<EventObserver>> observers;

  void add(const Event& event, Entry entry) {
    List& list = by_event[event.id()];
    if (!list) list = std::make_shared<std::vector<Entry>>();
    list->push_back(std::move(entry));
  }
  bool remove(int64_t id) {
    bool found = false;
    for (auto& kv : by_event) {
      const auto& old = *kv.second;
      if (std::none_of(old.begin(), old.end(), [&](const Entry& e) { return e.id == id; })) continue;
      auto copy = std::make_shared<std::vector<Entry>>();
      std::copy_if(old.begin(), old.end(), std::back_inserter(*copy), [&](const Entry& e) { return e.id != id; });
      kv.second = std::move(copy);
      found = true;
    }
    return found;
  }
  bool has(int64_t id) const {
    for (const auto& kv : by_event)
      for (const auto& e : *kv.second)
        if (e.id == id) return true;
    return false;
  }
};

}  // namespace engine
}  // namespace kindling
