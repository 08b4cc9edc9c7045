#pragma once
// What a supervised worker is started with (WorkerSpec), how the supervisor runs them
// (SupervisorOptions) and what became of them (WorkerResult, SupervisorResult): the leaf that
// supervisor.h (the supervisor) and worker.h (one worker as it holds it) both use, so that
// neither includes the other's. Plain POSIX; no LibTorch.
#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kindling {
namespace supervisor {

struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  /// Program and arguments (exec start); searched on PATH when it has no '/'.
  std::vector<std::string> argv;
  /// Variables set (or replaced) in the worker's environment.
  std::vector<std::pair<std::string, std::string>> env;
  /// Fork start: when set, the child calls this instead of exec and exits with its result.
  std::function<int()> entry;
};

struct SupervisorOptions {
  /// Written in front of every relayed line: "[rank<r>]: ". Off relays lines unchanged.
  bool prefix_output = true;
  /// Between SIGTERM and SIGKILL when workers are being stopped.
  std::chrono::milliseconds grace_period = std::chrono::seconds(3);
  /// Stderr lines kept per worker for the failure summary.
  std::size_t tail_lines = 10;
  /// Names the supervisor in messages ("kindling-run", "kindling::dist::Parallel").
  std::string name = "kindling-run";
  /// Asked about every `stop_check_every` while workers run (elastic agents: whether the
  /// next rendezvous round has started); when it returns true the workers are stopped as on
  /// a failure (SIGTERM, then SIGKILL after the grace period) and the result says
  /// stopped_on_request. Unset: never asked.
  std::function<bool()> stop_check;
  std::chrono::milliseconds stop_check_every = std::chrono::seconds(1);
  /// The attempt's flight-record folder (KINDLING_FLIGHT_RECORD_DIR of its workers). When a
  /// worker fails (or stop_check says to stop), the workers still running that handle SIGUSR1
  /// get it first, and are stopped once their records are in this folder or after
  /// flight_dump_wait: their records say where they waited. Empty, or a zero wait: stopped at once.
  std::string flight_record_folder;
  std::chrono::milliseconds flight_dump_wait = std::chrono::seconds(2);
};

struct WorkerResult {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool exited = false;  // exited normally (exit_code valid)
  int exit_code = 0;
  int signal = 0;        // the signal that ended it, when !exited
  bool stopped = false;  // we stopped it because another worker failed or on a signal
  int stop_signal = 0;   // the signal that last stopped (froze) it, 0 when it was running
  std::deque<std::string> stderr_tail;

  bool failed() const { return !stopped && (!exited || exit_code != 0); }
};

struct SupervisorResult {
  std::vector<WorkerResult> workers;
  /// 0 when every worker exited 0; else the first failure's exit code (128 + signal
  /// for a signal), or 128 + the signal the supervisor received.
  int exit_code = 0;
  int received_signal = 0;
  /// " from pid P (name)" of the process that sent received_signal, when known.
  std::string signal_sender;
  /// Human-readable account of the failures (empty on success).
  std::string summary;
  /// The workers were stopped because options.stop_check asked for it (and none had failed
  /// before); exit_code stays 0 unless one failed.
  bool stopped_on_request = false;
};

}  // namespace supervisor
}  // namespace kindling
