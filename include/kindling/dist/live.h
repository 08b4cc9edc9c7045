#pragma once
/// \file
/// Live recovery, the runtime's part: a new world made in the same process when a node is lost
/// or arrives, under `kindling-run --live_recovery` (its agent joins the next rendezvous round
/// with the workers running and hands them the round's layout). The training wing's part, which
/// keeps and restores the training state in memory, is kindling::handlers::LiveRecovery
/// (kindling/handlers/checkpointing/live_recovery.h). See docs/fault-tolerance.md.
#include <chrono>
#include <string>

#include "kindling/dist/dist.h"
#include "kindling/export.h"

namespace kindling {
namespace dist {

/// Whether this process was started by `kindling-run --live_recovery` (KINDLING_LIVE_DIR is
/// set). Where it was, the first call also tells kindling-run that the program takes part
/// (kindling::handlers::LiveRecovery calls it at its checks); kindling-run says once when
/// workers it kept through a new round failed without any having said so. Local; never throws.
KINDLING_API bool live_recovery_enabled();

/// Why backend `backend` ("mpi") cannot make a new world in this process, which rejoin() needs
/// (its traits say: "MPI is initialized once per process, ..."); empty where it can, and for a
/// name kindling does not know (initialize() refuses that one). Local; never throws.
KINDLING_API std::string why_no_new_world(const std::string& backend);

/// Whether the launcher has announced a rendezvous round newer than the one this process's
/// world was made in (a node was lost, failed or waits to join): the ranks should leave their
/// step and rejoin(). Reads one small file. Local; never throws (false without live recovery).
KINDLING_API bool new_round_announced();

/// Tells the launcher that this process's node leaves the job (its replica diverged:
/// kindling::handlers::LiveRecovery calls it on a rank that kindling::dist::check_replicas
/// named): its agent stops the node's workers, this one included, and ends without joining
/// another round; the other nodes go on without this host, as after a lost one (the round
/// they form counts as one of --max_restarts, as a lost host's does). `why` (its first 400
/// characters) is said in the agent's output. Local: each rank of the node may call it.
/// Throws kindling::UsageError without live recovery, and what writing the file in the live
/// folder throws (kindling::Error naming the path).
KINDLING_API void leave_job(const std::string& why);

/// The world a rejoin() made.
struct LiveWorld {
  int round = 0;     // the launcher's rendezvous round
  int restarts = 0;  // its failed rounds so far (TORCHELASTIC_RESTART_COUNT)
  int rank = 0;      // this process's rank in it
  int world_size = 1;
};

/// Makes this process's next world without restarting it: asks the launcher for a new round
/// (`why`, which it reports, e.g. the failed collective's message) unless one is announced,
/// waits up to `timeout` for the round's layout, finalizes the current world (also a broken
/// one, whose engine is then left behind), and initializes `backend` with `options` at the
/// new rank and world size: the round's layout goes to the runtime as a value, never through
/// the environment, and kindling's queries (detect_launch_environment, restart_count, the log's
/// rank) answer for the new round from then on; while the new world exists, RANK, WORLD_SIZE,
/// GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RESTART_COUNT are
/// also in the environment as the launcher would have set them (initialize() publishes them,
/// finalize() restores the launcher's); a round announced while the new world is being made
/// is taken in its place, as initialize() does. Every rank that goes on calls it; a new node's
/// ranks do not (they start in the round).
/// Throws kindling::UsageError without live recovery, kindling::TimeoutError when no round
/// comes within `timeout` (the launcher ends the job then), and what initialize() throws.
KINDLING_API LiveWorld rejoin(const std::string& backend, const InitOptions& options, const std::string& why,
                              std::chrono::milliseconds timeout = std::chrono::minutes(10));

}  // namespace dist
}  // namespace kindling
