#pragma once
// Internal: the handler registry of an Engine (shared with HandlerHandle, which outlives
// nothing: it holds a weak reference).
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "kindling/engine/engine.h"

namespace kindling {
namespace engine {

struct Engine::Registry {
  struct Entry {
    int64_t id;
    Event event;  // with its filter
    detail::Handler handler;
    bool removed = false;
  };
  std::map<int, std::vector<Entry>> by_event;  // event id -> entries in the order added
  std::set<int> registered_custom;
  int64_t next_id = 0;
  int firing = 0;  // nesting depth of fire(); removal compacts only at depth 0
  bool needs_compaction = false;

  bool remove(int64_t id) {
    bool found = false;
    for (auto& kv : by_event) {
      for (auto& e : kv.second) {
        if (e.id == id && !e.removed) {
          e.removed = true;
          found = true;
        }
      }
    }
    if (found) compact();
    return found;
  }
  bool has(int64_t id) const {
    for (const auto& kv : by_event)
      for (const auto& e : kv.second)
        if (e.id == id && !e.removed) return true;
    return false;
  }
  void compact() {
    if (firing > 0) {
      needs_compaction = true;
      return;
    }
    for (auto& kv : by_event) {
      auto& v = kv.second;
      v.erase(std::remove_if(v.begin(), v.end(), [](const Entry& e) { return e.removed; }), v.end());
    }
    needs_compaction = false;
  }
};

}  // namespace engine
}  // namespace kindling
