#pragma once
// Starts worker processes, relays their output line by line (optionally prefixed with the
// rank), forwards SIGINT / SIGTERM, and on the first failure stops the other workers
// (SIGTERM, then SIGKILL after a grace period) and summarises what failed. Used by the
// kindling-run CLI and by Parallel's spawn mode. Plain POSIX; no LibTorch.
#include <string>
#include <vector>

#include "supervisor/process/worker_spec.h"

namespace kindling {
namespace supervisor {

/// Runs the workers to completion. Throws std::runtime_error when a worker cannot be
/// started at all (fork or pipe failure); an exec failure is reported as exit code 127.
SupervisorResult supervise(const std::vector<WorkerSpec>& workers, const SupervisorOptions& options);

/// A TCP port that was free on every address of this host a moment ago, chosen at random
/// below the kernel's ephemeral range (so that no port-0 bind is given it before the store
/// binds it); from the ephemeral range only when there is no room below it. Throws
/// std::runtime_error when no socket can be bound.
int find_free_port();

/// "SIGKILL", "SIGTERM", ... or "signal <n>".
std::string signal_name(int sig);

}  // namespace supervisor
}  // namespace kindling
