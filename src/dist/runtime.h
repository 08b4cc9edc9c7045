#pragma once
// The lifecycle of kindling::dist (runtime.cpp): installing a distributed model, picking up
// a user's process group, finding a group's state. The state itself: runtime_state.h.
#include <chrono>
#include <memory>
#include <optional>

#include "dist/runtime_state.h"
#include "kindling/dist/dist.h"

namespace kindling {
namespace dist {
namespace detail {

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
