#pragma once
// The process-global state of kindling::dist (the "computation model" of idist): what
// initialize() made and every operation reads. A leaf below the lifecycle (runtime.h), so
// that the parts of initialize() in units of their own (agreement, layout) and the checks
// that read the world (fingerprint) include the state, not the lifecycle that calls them.
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dist/backends/backend.h"
#include "dist/backends/backend_traits.h"
#include "dist/diagnostics/stall_monitor.h"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace kindling {
namespace dist {
namespace detail {

struct Runtime {
  std::mutex mu;
  std::unique_ptr<Backend> backend;   // null in the serial model
  std::shared_ptr<GroupState> world;  // null in the serial model
  std::vector<std::weak_ptr<GroupState>> groups;
  std::unique_ptr<StallMonitor> monitor;
  std::string backend_name = "serial";
  // What generic code asks about the backend; null in the serial model and for an adopted
  // c10d group of an engine kindling does not know.
  const BackendTraits* traits = nullptr;
  int rank = 0, world_size = 1, local_rank = 0, nproc_per_node = 1, nnodes = 1, node_rank = 0;
  int next_group_index = 1;
  std::optional<std::vector<std::string>> env_snapshot;
  std::optional<int> local_rank_hint;
  std::atomic<bool> need_sync{true};
  // Set when a collective failed or timed out: the engine may still hold threads blocked
  // on peers, so nothing more is sent, and finalize() leaves the engine objects alone
  // (destroying them would wait for those threads) instead of hanging.
  std::atomic<bool> broken{false};
  std::string broken_reason;

  // A process group handed over by the user (kindling/dist/c10d.h), picked up by sync().
  c10::intrusive_ptr<c10d::ProcessGroup> external_pg;
  c10::intrusive_ptr<c10d::Store> external_store;
  std::string external_backend;
  std::chrono::milliseconds external_timeout{std::chrono::minutes(30)};
};

/// The one Runtime of this process, made on first use and never destroyed (atexit paths use
/// it). Never throws; callers lock `mu` where they need a consistent view.
Runtime& runtime();

}  // namespace detail
}  // namespace dist
}  // namespace kindling
