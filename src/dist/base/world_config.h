#pragma once
// The runtime's leaf (src/dist/base/): how a world starts (WorldConfig) and where its stall
// monitor talks (MonitorTarget). The rendezvous, the backends and the runtime include it;
// it includes no other part of kindling.
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace c10d {
class Store;
}

namespace kindling::dist::detail {

/// What initialize() resolved from its options and the launcher's environment, handed to a
/// backend's factory (backend.h's BackendTraits::make) and to the rendezvous.
struct WorldConfig {
  int rank = 0;
  int world_size = 1;
  std::optional<int> local_rank;  // from the launcher's environment, when it says
  std::string init_method;        // env://, tcp://..., file://...
  std::string master_addr;
  int master_port = 0;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds stall_period{0};  // 0: stall detection off
  int gloo_threads = 2;
  /// Who started this process (LaunchEnvironment::launcher: "torchrun", "mpirun", "slurm",
  /// "env", ...), for messages of backends whose launcher connects the ranks.
  std::string launcher;
  /// The launcher's variables this process was started with ("RANK=1, WORLD_SIZE=4"; before
  /// initialize set any), for a rank left waiting: what told it its place.
  std::string launch_variables;
  /// Set once the world being made is given up (live recovery: the launcher announced a newer
  /// round while this rank waited for the others, src/dist/live_round.h) and left to end on a
  /// thread of its own: its failure is then neither recorded nor published to the other ranks,
  /// and its watchdog stands down. Null where nobody can give it up.
  std::shared_ptr<std::atomic<bool>> given_up;
};

/// The store the stall monitor talks to (its own connection where the engine's store is a
/// TCP client, so that a stuck read blocks nobody else) and who hosts it, for messages.
struct MonitorTarget {
  c10::intrusive_ptr<c10d::Store> store;
  /// Global rank that hosts the store server; -1 when no rank does (torchrun's agent,
  /// a file store, a store handed over by the user).
  int host_rank = -1;
  /// Who hosts it when host_rank is -1 ("torchrun's agent", "the file /x/y").
  std::string host;
};

}  // namespace kindling::dist::detail
