// What generic code knows about the mpi backend (backend_traits.h); compiled in every build.
#include "dist/backends/mpi/mpi_backend.h"
#include "kindling/config.h"

namespace kindling::dist::detail {

BackendTraits mpi_traits() {
  BackendTraits t;
  t.name = "mpi";
  t.build_hint = "mpi needs Open MPI and -DKINDLING_WITH_MPI=ON";
  t.own_launcher = "MPI's launcher (mpirun, srun --mpi=pmix)";
  t.launch_command = [](int n) {
    return "`mpirun -np " + std::to_string(n) + " <this program and its arguments>` (or `srun --mpi=pmix -n " +
           std::to_string(n) + " ...` under Slurm)";
  };
  // MPI's blocking calls cannot be cut into short waits: they ask from inside.
  t.stall_watch = StallWatch::kInside;
  // MPI must be finalized, and its shared-memory path gives up cleanly.
  t.abandon_engine_after_failure = false;
  // A lost rank ends the whole job; MPI is initialized once per process.
  t.no_new_world = "MPI is initialized once per process, and a lost rank ends the whole MPI job";
  // An MPI request must not be tested while another thread waits on it; the recorder writes
  // its records as c10d's (flight_recorder_name empty).
  t.agreed_variables = {"KINDLING_MPI_NO_SHM", "KINDLING_MPI_SHM_SEGMENT", "KINDLING_MPI_SHM_MIN_BYTES",
                        "KINDLING_MPI_SHM_HEAP_MB"};
#if KINDLING_HAS_MPI
  t.make = make_mpi_backend;
#endif
  return t;
}

}  // namespace kindling::dist::detail
