#pragma once
// Multi-process test harness: a test re-executes its own binary N times (hidden flag
// --kindling-worker=<name>), one process per rank, with RANK / LOCAL_RANK / WORLD_SIZE /
// MASTER_ADDR=127.0.0.1 / a free MASTER_PORT, waits for all of them with a deadline, kills
// stragglers and reports each rank's exit status and output.
#include <chrono>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace kindling {
namespace testing {

using WorkerFn = std::function<void()>;
bool register_worker(const std::string& name, WorkerFn fn);
/// Runs the worker named by --kindling-worker=<name> if present; returns its exit code,
/// or -1 when argv has no such flag.
int maybe_run_worker(int argc, char** argv);

struct RankResult {
  int rank = -1;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
  bool ok() const { return exit_code == 0 && signal == 0 && !timed_out; }
};

struct LaunchOptions {
  int world_size = 2;
  std::chrono::milliseconds deadline = std::chrono::seconds(60);
  /// Extra environment for every rank ("" value: unset the variable). Without one of its own,
  /// KINDLING_FLIGHT_RECORD_DIR is a folder removed with the run's other files, and (unless this
  /// process has it, or set_dist_env is off) OMP_NUM_THREADS is the cores / world_size, at least 1.
  std::map<std::string, std::string> env;
  /// Per-rank extra environment.
  std::map<int, std::map<std::string, std::string>> rank_env;
  /// Ranks that run another command instead of the worker (for Python peers).
  std::map<int, std::vector<std::string>> commands;
  /// Set RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_*.
  bool set_dist_env = true;
  /// The backend the workers should use (KINDLING_TEST_BACKEND, see test_backend()). For
  /// "mpi" the ranks are started by a real `mpirun -np world_size` instead (no RANK etc.).
  std::string backend = "gloo";
};

/// In a worker: the backend its test asked for (KINDLING_TEST_BACKEND, default "gloo").
std::string test_backend();

/// The backends of this build that multi-process CPU tests run on (not serial; not nccl,
/// which needs GPUs and has its own tests).
std::vector<std::string> cpu_backends();
/// Every (cpu backend, world size) pair, for INSTANTIATE_TEST_SUITE_P.
std::vector<std::tuple<std::string, int>> cpu_backend_world_sizes(const std::vector<int>& sizes);
/// The gtest suffix of such a pair: "gloo_2ranks".
std::string backend_world_size_name(const std::tuple<std::string, int>& param);

int free_port();
std::vector<RankResult> run_workers(const std::string& worker, const LaunchOptions& options);
/// Runs one command (argv[0] an absolute path) with extra environment, killing it after
/// the deadline; its stdout and stderr are captured.
RankResult run_command(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
                       std::chrono::milliseconds deadline = std::chrono::seconds(60));

/// A readable summary of all ranks (for assertion messages).
std::string describe(const std::vector<RankResult>& results);

/// Throws std::runtime_error with the location unless cond holds (for use inside workers).
#define WCHECK(cond, ...)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::ostringstream kindling_wcheck_;                                            \
      kindling_wcheck_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond " " \
                       << "" __VA_ARGS__;                                             \
      throw std::runtime_error(kindling_wcheck_.str());                               \
    }                                                                                 \
  } while (0)

#define KINDLING_WORKER(name)                                                                                         \
  static void kindling_worker_##name();                                                                               \
  static const bool kindling_worker_reg_##name = ::kindling::testing::register_worker(#name, kindling_worker_##name); \
  static void kindling_worker_##name()

}  // namespace testing
}  // namespace kindling
