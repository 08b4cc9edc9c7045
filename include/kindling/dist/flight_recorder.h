#pragma once
// The flight recorder: every rank keeps its last collectives (each group's sequence number,
// operation, sizes, dtypes, state, times) in a bounded ring, and writes them to a file when
// a collective fails or times out, when a stall is found, when the program ends on an
// uncaught exception, on SIGUSR1, and when asked (dump_flight_record). The files are in the
// format of PyTorch's flight recorder, so torch's analyzer reads a whole job's dumps:
//   torchfrtrace <flight_record_folder()>
// names a rank that never joined a collective, or ranks that called different collectives,
// sizes or dtypes at the same place (docs/debugging.md).
//
// Settings (environment, read when the first collective is recorded):
//   KINDLING_FLIGHT_RECORDER      entries kept per process (default 2000; 0 turns it off)
//   KINDLING_FLIGHT_RECORD_DIR    the folder of the dumps (default: see flight_record_folder)
// What is recorded: the collectives of kindling::dist on every group this rank belongs to
// (blocking and asynchronous, DDP's buckets included); point-to-point operations are not
// (as torch's gloo), since the analyzer counts them as collectives of the whole group.
#include <string>

#include "kindling/export.h"

namespace kindling {
namespace dist {

/// Writes this rank's flight record now, as flight_record_folder()/kindling_fr_rank_<rank>
/// (replacing an earlier dump of this rank whole, never a part), and returns its path; ""
/// when the recorder is off (KINDLING_FLIGHT_RECORDER=0). Any rank may call it, alone (no
/// collective). Throws kindling::Error naming the path and the system's reason when the
/// file cannot be written.
KINDLING_API std::string dump_flight_record();

/// The folder the dumps of this job go to, the same on every rank of one host:
/// KINDLING_FLIGHT_RECORD_DIR when set (kindling-run and Parallel's spawn mode set it for each
/// attempt of their workers: <TMPDIR or /tmp>/kindling-flight-records/<run id>/attempt<N>, or
/// attempt<N> under the KINDLING_FLIGHT_RECORD_DIR they were given), else
/// <TMPDIR or /tmp>/kindling-flight-records/<the job's identity> (torchrun's run id, Slurm's job
/// id, mpirun's namespace, or MASTER_ADDR and MASTER_PORT). Never throws. Any rank.
KINDLING_API std::string flight_record_folder();

}  // namespace dist
}  // namespace kindling
