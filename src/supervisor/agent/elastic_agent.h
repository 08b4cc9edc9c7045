#pragma once
// One node's agent of an elastic job (kindling-run --nnodes MIN:MAX): it hosts the
// rendezvous when --rdzv_endpoint is an address of its own host (rendezvous_server.h),
// joins a round, starts its workers with the round's layout, and joins the next round when
// its workers fail or another node waits for one (a failed node, a new node). Plain POSIX;
// used by kindling-run.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/round.h"
#include "supervisor/rendezvous/rendezvous_access.h"
#include "supervisor/rendezvous/rendezvous_server.h"
#include "supervisor/process/supervisor.h"

namespace kindling {
namespace supervisor {

/// What a round gives this node (common/round.h: its one codec writes the rendezvous server's
/// answer and the live channel's file).
using RoundLayout = ::kindling::detail::Round;

/// torchrun's variables of local rank `local` of a node of `nproc` workers in `layout`:
/// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR
/// and MASTER_PORT, and OMP_NUM_THREADS = the machine's cores / `nproc` (at least 1) unless this
/// process's environment sets it (kindling-run and Parallel's spawn mode add their own). Never throws.
std::vector<std::pair<std::string, std::string>> worker_environment(const RoundLayout& layout, int local, int nproc);

/// Runs this node's part of the job until it succeeds, fails for good, or a signal ends it.
/// `make_workers` builds this node's workers for a round (ranks, torchrun's variables);
/// the agent adds the attempt's TORCHELASTIC_* variables. Returns the launcher's exit
/// status: 0 on success, the failed worker's code, 128 + a signal, 1 when the rendezvous
/// fails (the reason written to stderr, naming the hosts lost). Throws std::runtime_error
/// when workers cannot be started at all.
int run_elastic_agent(const ElasticAgentOptions& options,
                      const std::function<std::vector<WorkerSpec>(const RoundLayout&)>& make_workers,
                      const SupervisorOptions& supervisor);

}  // namespace supervisor
}  // namespace kindling
