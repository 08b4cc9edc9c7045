#pragma once
// What generic code needs to know about one backend (BackendTraits), declared by each backend
// (<name>_traits.cpp) and listed by the registry (registry.h). The runtime, Parallel, the
// stall watch, the settings agreement, the flight recorder, live recovery and the adoption of
// a user's c10d group ask these traits and never compare backend names. A leaf: whoever needs
// only the traits includes this header, not the registry (which includes every backend).
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

/// How a rank's wait on its engine is watched for stalled peers (dist/collectives/call.cpp).
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
  /// Why this backend cannot make a new world in the same process (live recovery's rejoin),
  /// or empty where it can.
  std::string no_new_world;
  /// The engine's name in torch's flight recorder files, where torchfrtrace knows it ("gloo",
  /// "nccl"); empty: the records are written as c10d's.
  std::string flight_recorder_name;
  /// Whether a started operation may be asked if it completed from any thread while another
  /// thread waits on it (c10d's work objects; not an MPI request): the flight recorder asks the
  /// operations still pending when it dumps only where this is true.
  bool polls_from_any_thread = false;
  /// A c10d engine whose kernels lack int16, bool and complex tensors (and bfloat16 where
  /// KINDLING_GLOO_REDUCES_BF16 is unset): the c10d adapter (c10d_communicator.cpp) moves them
  /// as a dtype of the same size and reduces them in a wider one.
  bool widens_missing_dtypes = false;
  /// A c10d engine whose own reduce-scatter and all-gather of flat tensors the c10d adapter
  /// uses (nccl); without it, the point-to-point exchanges of src/dist/collectives/exchange.cpp (gloo: they
  /// are faster there, docs/performance.md "ZeRO-1").
  bool native_chunk_collectives = false;
  /// Whether the wait of a started send or receive may end at its timeout and be waited on again
  /// (nccl, mpi); gloo closes every connection of the group when such a wait times out, so the
  /// exchanges wait on its messages from a thread of their own (src/dist/collectives/exchange.cpp).
  bool message_waits_may_time_out = true;
  /// For a user's c10d process group of this engine (kindling/dist/c10d.h): makes the
  /// process groups of later new_group calls, with the adopted group's timeout. Null:
  /// new_group on such a group is refused.
  std::function<ProcessGroupFactory(std::chrono::milliseconds timeout)> adopted_groups;
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
