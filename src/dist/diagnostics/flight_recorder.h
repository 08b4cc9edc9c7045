#pragma once
// The flight recorder's ring (kindling/dist/flight_recorder.h): call.h records each
// collective as it starts and completes; flight_dump.cpp writes the ring in the format of
// PyTorch's flight recorder. Recording is one short lock and a few stores: no allocation
// for tensors of up to 6 dimensions once the ring is made.
#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kindling {
namespace dist {
namespace detail {

struct BackendTraits;
struct GroupState;
struct WorkState;

/// One collective as the ring keeps it.
struct FlightEntry {
  int64_t id = -1;  // record id: this process's count of records since the world was made
  int group = 0;    // GroupState::id
  int group_size = 1;
  int64_t seq = 0;  // the group's collective sequence number (1 for its first)
  const char* op = "";
  bool has_tensor = false;
  at::ScalarType dtype = at::kFloat;
  c10::SmallVector<int64_t, 6> sizes;
  int64_t created_ns = 0;        // system clock, when it started
  int64_t started_steady = 0;    // steady clock
  int64_t completed_steady = 0;  // 0 while not seen complete
  int64_t timeout_ms = 0;
  std::weak_ptr<WorkState> work;  // asynchronous operations: asked at dump time
};

/// What a dump holds: the entries oldest first (their state settled), the groups' ranks.
struct FlightSnapshot {
  std::vector<FlightEntry> entries;
  std::vector<std::pair<int, std::vector<int>>> groups;  // id, global ranks
  int rank = 0, world_size = 1;
  std::string backend;
  std::string engine;  // the traits' flight_recorder_name: empty for c10d's
};

/// Records collective #seq `name` on `g` as started (`tensor`, if not null, gives its dtype
/// and shape; `work`, for an asynchronous one, is asked whether it completed at dump time).
/// Returns the record's id, or -1 when the recorder is off. Never throws.
int64_t flight_start(const GroupState& g, int64_t seq, const char* name, const at::Tensor* tensor,
                     const std::shared_ptr<WorkState>* work = nullptr) noexcept;

/// Marks record `id` completed; nothing for -1 or a record the ring has overwritten since.
void flight_complete(int64_t id) noexcept;

/// A new world (initialize): empties the ring and notes who this rank is. Makes the ring on
/// the first call when the recorder is on (KINDLING_FLIGHT_RECORDER; throws
/// kindling::UsageError for a malformed value). `traits` (null for an engine kindling does not
/// know) say how the engine is named in the files and whether pending operations may be asked.
void flight_reset(int rank, int world_size, const std::string& backend, const BackendTraits* traits);

/// Whether the recorder is on (after flight_reset).
bool flight_enabled() noexcept;

/// The ring now, oldest first, with the state of asynchronous entries settled.
FlightSnapshot flight_snapshot();

}  // namespace detail
}  // namespace dist
}  // namespace kindling
