#pragma once
// What a failed attempt's flight records say (kindling/dist/flight_recorder.h): kindling-run
// and Parallel's spawn mode give their workers one folder per attempt and, when the attempt
// fails, read the dumps the workers wrote there and add the verdict to the failure's summary.
// Plain C++ on POSIX; no LibTorch.
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace kindling {
namespace supervisor {

/// The folder of `attempt`'s flight records under `base` (KINDLING_FLIGHT_RECORD_DIR when
/// the user set it, else <TMPDIR or /tmp>/kindling-flight-records/<run_id>), made empty of
/// an earlier attempt's records of the same name. Throws std::runtime_error when it cannot
/// be made.
std::string flight_attempt_folder(const std::string& run_id, int attempt);

/// Removes `folder` (made by flight_attempt_folder) when no worker wrote a record there, and
/// then the run's folder and the shared kindling-flight-records when they are empty and were
/// not given by the user: a job that fails nowhere leaves nothing behind. Never throws.
void remove_empty_flight_folders(const std::string& folder);

/// Whether process `pid` handles SIGUSR1 (its SigCgt in /proc): a kindling program with the
/// flight recorder on writes its record then. False when it cannot be told. Never throws.
bool handles_sigusr1(pid_t pid);

/// Whether `rank`'s record in `folder` was written at or after `since_ns` (the system clock,
/// ns since the epoch). Never throws.
bool flight_record_written(const std::string& folder, int rank, int64_t since_ns);

/// Describes the dumps in `folder` (kindling_fr_rank_<rank>): which ranks wrote one, and the
/// first collective of each group that the ranks did not all call alike: the ranks that never
/// called it while the others wait in it, or different operations, sizes or dtypes; then how
/// to read them with torch's analyzer. "" when the folder holds no dump. Never throws: a file
/// it cannot read is named as such.
std::string flight_verdict(const std::string& folder);

}  // namespace supervisor
}  // namespace kindling
