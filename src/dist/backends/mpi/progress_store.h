#pragma once
// The progress store of an mpi job. mpirun and srun connect MPI ranks without a rendezvous
// store, but the stall monitor (dist/diagnostics/stall_monitor.h) publishes and reads progress through
// one, on a connection that a frozen rank cannot block in MPI. Rank 0 therefore starts a
// small c10d TCPStore on a free port and tells the others where it is (MPI_Bcast).
#include "dist/backends/mpi/mpi_c.h"

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

/// Called by every rank of `world` (collective). Rank 0 hosts the store at MASTER_ADDR when
/// set, else at its host name; the others connect to it. Never throws: where the store
/// cannot be started or reached, the rank logs a warning saying that stall detection is
/// off and why, and gets an empty target.
MonitorTarget open_progress_store(MPI_Comm world, int rank, std::chrono::milliseconds timeout);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
