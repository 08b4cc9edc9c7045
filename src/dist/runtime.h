#pragma once
// Process-global state of kindling::dist (the "computation model" of idist).
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dist/backends/backend.h"
#include "dist/backends/registry.h"
#include "dist/diagnostics/stall_monitor.h"
#include "kindling/dist/dist.h"

namespace c10d {
class ProcessGroup;
}

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

Runtime& runtime();

/// Lazily picks up an external context while serial (idist's _need_to_sync).
void maybe_sync();

/// The state of `group` (the world for a default Group); throws when the group was
/// created before the last finalize(). Returns null in the serial model.
std::shared_ptr<GroupState> resolve(const Group& group, const char* caller);

/// Installs a distributed model from a backend whose world communicator exists.
/// `stall_period` configures the stall monitor (zero: off).
void install_model(std::unique_ptr<Backend> backend, int rank, int world_size, std::chrono::milliseconds timeout,
                   std::chrono::milliseconds stall_period, std::optional<int> env_local_rank);

/// Warns once per process (kindling's log, every rank) when a launcher runs this program as
/// one of several ranks and `what` (a rank query or a collective) is called while no
/// distributed model was ever installed: every rank then acts as rank 0 of 1 without a
/// word. is_initialized() does not warn. Never throws. (uninitialized_warning.cpp)
void warn_if_never_initialized(const char* what);
/// Records that a distributed model was installed (no warning afterwards, after finalize too).
void note_model_installed();

/// The default stall period: KINDLING_STALL_TIMEOUT, else 60 s.
std::chrono::milliseconds default_stall_period();

}  // namespace detail
}  // namespace dist
}  // namespace kindling
