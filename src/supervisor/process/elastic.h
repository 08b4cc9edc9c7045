#pragma once
// Restarts on failure (torchrun's --max_restarts semantics) around supervise(): when any
// worker of an attempt fails, the supervisor stops the others, and if restarts are left
// every worker starts again with TORCHELASTIC_RESTART_COUNT one higher and the same
// KINDLING_RUN_ID (the job's identity across attempts). Each worker gets
// its own TORCHELASTIC_ERROR_FILE; a failed attempt's summary ends with the first failure
// read from those files (rank, time, message). A signal to the launcher ends it without
// restart. Used by kindling-run and Parallel's spawn mode. Plain POSIX; no LibTorch.
#include <vector>

#include "supervisor/process/supervisor.h"

namespace kindling {
namespace supervisor {

struct ElasticOptions {
  /// Restarts after a failed attempt (0: fail at the first failure).
  int max_restarts = 0;
  /// Give each restart a new free MASTER_PORT (for a port the launcher chose itself: the
  /// failed attempt's store may linger on the old one).
  bool fresh_port = false;
  /// The job's identity, the same in every attempt (KINDLING_RUN_ID in each worker's
  /// environment; kindling::dist::run_id()). Empty: a new unique one (new_run_id()).
  std::string run_id;
};

/// A job identity unique across hosts, processes and time: "<host>-<pid>-<UTC
/// yyyymmddTHHMMSS>-<8 random hex digits>".
std::string new_run_id();

/// Runs attempts until one succeeds, a signal arrives or the restarts are used up; returns
/// the last attempt's result. Failed attempts that are followed by a restart have their
/// summaries written to stderr. Throws what supervise() throws.
SupervisorResult supervise_elastic(const std::vector<WorkerSpec>& workers, const SupervisorOptions& options,
                                   const ElasticOptions& elastic);

/// A private folder for the attempts' error files (TORCHELASTIC_ERROR_FILE), removed with
/// the files when destroyed. Throws std::runtime_error when it cannot be made.
class ErrorFolder {
 public:
  ErrorFolder();
  ~ErrorFolder();
  ErrorFolder(const ErrorFolder&) = delete;
  ErrorFolder& operator=(const ErrorFolder&) = delete;
  /// A new file name for `rank` in `attempt` (the file is made by the worker).
  std::string file(int attempt, int rank);

 private:
  std::string path_;
  std::vector<std::string> files_;
};

/// Who a job is: the identity the user gave or new_run_id() made (the same for every job
/// given that --rdzv_id), and the token of this start of the job (new_run_id(), made once
/// when the job starts and kept in its restarts), which no other job has.
struct JobIdentity {
  std::string run_id;
  std::string instance;
};

/// Where an attempt's workers write what the launcher reads after a failure.
struct AttemptFiles {
  std::vector<std::string> error_files;  // by worker
  std::string flight_folder;             // their flight records (flight_verdict.h)
};

/// Adds one attempt's variables to every worker's environment: TORCHELASTIC_RESTART_COUNT
/// (`restart_count`), TORCHELASTIC_MAX_RESTARTS, KINDLING_RUN_ID and KINDLING_RUN_INSTANCE
/// (`job`), a TORCHELASTIC_ERROR_FILE from `folder` and the attempt's
/// KINDLING_FLIGHT_RECORD_DIR (flight_attempt_folder); returns those files.
AttemptFiles prepare_attempt(std::vector<WorkerSpec>& workers, int attempt, int restart_count, int max_restarts,
                             const JobIdentity& job, ErrorFolder& folder);

/// What the flight records of a failed attempt say, as a line of its summary ("" when no
/// worker wrote one). Never throws.
std::string flight_line(const AttemptFiles& files);

/// The first failure of an attempt from the workers' error files: "rank R (local rank L) at
/// <UTC time>: <message>"; empty when no failed worker left a file.
std::string first_failure(const SupervisorResult& result, const std::vector<std::string>& error_files);

}  // namespace supervisor
}  // namespace kindling
