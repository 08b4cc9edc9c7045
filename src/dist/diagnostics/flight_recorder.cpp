// The flight recorder's ring (flight_recorder.h).
#include "dist/diagnostics/flight_recorder.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "common/env.h"
#include "dist/backends/backend.h"
#include "dist/backends/backend_traits.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

constexpr int64_t kDefaultEntries = 2000;  // as torch's flight recorder keeps by default

int64_t now_ns(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Ring {
  std::mutex mu;
  std::vector<FlightEntry> entries;  // empty: the recorder is off
  int64_t next_id = 0;
  std::vector<std::pair<int, std::vector<int>>> groups;
  int rank = 0, world_size = 1;
  std::string backend, engine;
  bool polls_from_any_thread = false;
};

Ring& ring() {
  static Ring* r = new Ring();  // never destroyed: records may come from threads during exit
  return *r;
}

int64_t configured_entries() {
  const auto value = ::kindling::detail::get_env_int("KINDLING_FLIGHT_RECORDER");
  if (!value) return kDefaultEntries;
  KINDLING_CHECK(*value >= 0, "KINDLING_FLIGHT_RECORDER=", *value,
                 ": the flight recorder keeps that many collectives per process; give a count (2000 is the "
                 "default) or 0 to turn it off");
  return *value;
}

void note_group(Ring& r, const GroupState& g) {
  for (const auto& known : r.groups)
    if (known.first == g.id) return;
  r.groups.emplace_back(g.id, g.ranks);
}

}  // namespace

void flight_reset(int rank, int world_size, const std::string& backend, const BackendTraits* traits) {
  static const int64_t capacity = configured_entries();
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries.assign(static_cast<std::size_t>(capacity), FlightEntry());
  r.next_id = 0;
  r.groups.clear();
  r.rank = rank;
  r.world_size = world_size;
  r.backend = backend;
  r.engine = traits ? traits->flight_recorder_name : std::string();
  r.polls_from_any_thread = traits && traits->polls_from_any_thread;
}

bool flight_enabled() noexcept {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  return !r.entries.empty();
}

int64_t flight_start(const GroupState& g, int64_t seq, const char* name, const at::Tensor* tensor,
                     const std::shared_ptr<WorkState>* work) noexcept {
  const auto created = std::chrono::system_clock::now();
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.entries.empty()) return -1;
  try {
    const int64_t id = r.next_id++;
    FlightEntry& e = r.entries[static_cast<std::size_t>(id % static_cast<int64_t>(r.entries.size()))];
    note_group(r, g);
    e.id = id;
    e.group = g.id;
    e.group_size = static_cast<int>(g.ranks.size());
    e.seq = seq;
    e.op = name;
    e.has_tensor = tensor != nullptr && tensor->defined();
    e.sizes.clear();
    if (e.has_tensor) {
      e.dtype = tensor->scalar_type();
      e.sizes.append(tensor->sizes().begin(), tensor->sizes().end());
    }
    e.created_ns = now_ns(created);
    e.started_steady = steady_ns();
    e.completed_steady = 0;
    e.timeout_ms = g.timeout.count();
    if (work != nullptr)
      e.work = *work;
    else
      e.work.reset();
    return id;
  } catch (...) {  // a failed append (no memory) loses this record, never the collective
    return -1;
  }
}

void flight_complete(int64_t id) noexcept {
  if (id < 0) return;
  const int64_t now = steady_ns();
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.entries.empty()) return;
  FlightEntry& e = r.entries[static_cast<std::size_t>(id % static_cast<int64_t>(r.entries.size()))];
  if (e.id == id) e.completed_steady = now;
}

FlightSnapshot flight_snapshot() {
  FlightSnapshot s;
  bool polls = false;
  {
    Ring& r = ring();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const FlightEntry& e : r.entries)
      if (e.id >= 0) s.entries.push_back(e);
    s.groups = r.groups;
    s.rank = r.rank;
    s.world_size = r.world_size;
    s.backend = r.backend;
    s.engine = r.engine;
    polls = r.polls_from_any_thread;
  }
  std::sort(s.entries.begin(), s.entries.end(),
            [](const FlightEntry& a, const FlightEntry& b) { return a.id < b.id; });
  // An asynchronous operation that completed but was not waited for yet is complete: every
  // rank's part of it is done. Asked outside the ring's lock, of the engines whose operations
  // may be asked from any thread (the traits' polls_from_any_thread: c10d's work objects, not
  // an mpi request, which must not be tested while another thread waits on it).
  if (!polls) return s;
  for (FlightEntry& e : s.entries) {
    if (e.completed_steady != 0) continue;
    if (auto work = e.work.lock()) {
      try {
        if (work->op && work->op->is_completed()) e.completed_steady = steady_ns();
      } catch (...) {  // a failed operation stays "started"
      }
    }
  }
  return s;
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
