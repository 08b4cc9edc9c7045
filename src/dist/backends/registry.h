#pragma once
// Which backends exist and what generic code needs to know about each (BackendTraits).
// The runtime, Parallel, the stall watch, the settings agreement and the adoption of a
// user's c10d group ask these traits and never compare backend names; adding a backend
// means a folder under src/dist/backends/ (the file set is in backend.h) and one line in
// registry.cpp.
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/base/world_config.h"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace kindling {
namespace dist {
namespace detail {

class Backend;

/// Makes the process group of one group from its store (c10d_compat.h's group_store),
/// the member's group rank, the group size and the group's name ("0" world, "<k>" k-th
/// new_group).
using ProcessGroupFactory = std::function<c10::intrusive_ptr<c10d::ProcessGroup>(
    c10::intrusive_ptr<c10d::Store> store, int group_rank, int group_size, const std::string& group_name)>;

/// How a rank's wait on its engine is watched for stalled peers (dist/call.cpp).
enum class StallWatch {
  kNone,    ///< not watched (the wait does not block the CPU: nccl)
  kSlices,  ///< a wait that expired may be waited on again: wait in short slices, ask between (gloo)
  kInside,  ///< one blocking call that asks a StallCheck from inside; collectives only (mpi)
};

/// What generic code needs to know about one backend.
struct BackendTraits {
  /// The name users pass to initialize() ("gloo").
  std::string name;
  /// False only for "serial": the process runs alone and no engine is made.
  bool joins_ranks = true;
  /// Starts this rank's engine and the world group: called by initialize() on every rank
  /// with the resolved config; throws kindling::Error or an engine exception. Null when this
  /// build of kindling does not have the backend (then `build_hint` says how to get it).
  std::function<std::unique_ptr<Backend>(const WorldConfig&)> make;
  /// How to build kindling with this backend ("configure ... -DKINDLING_WITH_X=ON").
  std::string build_hint;
  /// Needs a visible CUDA device; `without_cuda` is the advice when there is none.
  bool needs_cuda = false;
  std::string without_cuda;
  /// Tensors its collectives take (declared to c10d when a user's engine is adopted).
  bool serves_cpu = true;
  bool serves_cuda = true;
  /// Empty when ranks meet through a rendezvous (init_method, MASTER_ADDR) and a program may
  /// start its own processes (Parallel). Else who connects the ranks instead ("MPI's
  /// launcher (mpirun, srun --mpi=pmix)"), and `launch_command(n)` the command that starts n.
  std::string own_launcher;
  std::function<std::string(int processes)> launch_command;
  /// How waits are watched for stalls.
  StallWatch stall_watch = StallWatch::kNone;
  /// After a failed collective, finalize() leaves the engine objects alive (their threads may
  /// still wait on peers) instead of destroying them; false where the engine must be shut
  /// down in any case (MPI_Finalize).
  bool abandon_engine_after_failure = true;
  /// Environment variables whose values every rank must share (dist/agreement.cpp).
  std::vector<std::string> agreed_variables;
  /// For a user's c10d process group of this engine (kindling/dist/c10d.h): makes the
  /// process groups of later new_group calls, with the adopted group's timeout. Null:
  /// new_group on such a group is refused.
  std::function<ProcessGroupFactory(std::chrono::milliseconds timeout)> adopted_groups;
};

/// The traits of backend `name`, or null when kindling knows no such backend. Never throws.
const BackendTraits* find_backend(const std::string& name);

/// The traits of backend `name` for `caller` ("kindling::dist::initialize"), checked for this
/// machine and build. Throws kindling::UsageError for an unknown name, a backend this build
/// lacks, or a CUDA backend without CUDA (ignite's message), each saying what to do.
const BackendTraits& usable_backend(const std::string& name, const std::string& caller);

/// The names of the backends this build has, "serial" first. Never throws.
std::vector<std::string> built_backends();

}  // namespace detail
}  // namespace dist
}  // namespace kindling
