#include "support/multiprocess.h"

#include <kindling/dist/dist.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include "supervisor/process/supervisor.h"

namespace kindling {
namespace testing {
namespace {

std::map<std::string, WorkerFn>& registry() {
  static std::map<std::string, WorkerFn> r;
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// As a launcher does (kindling::supervisor::worker_environment): the cores shared between the
// `ranks` workers unless the test or this process's environment says otherwise. LibTorch's
// default (a thread per core in every worker) made the 3-rank gloo tests on 2 cores 4 times slower.
void share_cores(std::map<std::string, std::string>& env, int ranks) {
  if (env.count("OMP_NUM_THREADS") || std::getenv("OMP_NUM_THREADS")) return;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  env["OMP_NUM_THREADS"] = std::to_string(std::max(1u, cores / static_cast<unsigned>(std::max(1, ranks))));
}

std::string tail(const std::string& s, std::size_t n = 3000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

}  // namespace

bool register_worker(const std::string& name, WorkerFn fn) {
  registry()[name] = std::move(fn);
  return true;
}

int maybe_run_worker(int argc, char** argv) {
  const std::string flag = "--kindling-worker=";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind(flag, 0) != 0) continue;
    const std::string name = a.substr(flag.size());
    auto it = registry().find(name);
    if (it == registry().end()) {
      std::cerr << "unknown worker " << name << "\n";
      return 3;
    }
    try {
      it->second();
    } catch (const std::exception& e) {
      std::cerr << "WORKER FAILED: " << e.what() << std::endl;
      return 1;
    }
    return 0;
  }
  return -1;
}

int free_port() { return kindling::supervisor::find_free_port(); }

std::string test_backend() {
  const char* b = std::getenv("KINDLING_TEST_BACKEND");
  return b ? b : "gloo";
}

std::vector<std::string> cpu_backends() {
  std::vector<std::string> out;
  for (const auto& b : kindling::dist::available_backends()) {
    if (b != "serial" && b != "nccl") out.push_back(b);
  }
  return out;
}

std::vector<std::tuple<std::string, int>> cpu_backend_world_sizes(const std::vector<int>& sizes) {
  std::vector<std::tuple<std::string, int>> out;
  for (const auto& b : cpu_backends()) {
    for (int n : sizes) out.emplace_back(b, n);
  }
  return out;
}

std::string backend_world_size_name(const std::tuple<std::string, int>& param) {
  return std::get<0>(param) + "_" + std::to_string(std::get<1>(param)) + "ranks";
}

namespace {

// Starts the workers under a real mpirun; each rank's output and exit status go to files.
std::vector<RankResult> run_under_mpirun(const std::string& worker, const LaunchOptions& options) {
  const int n = options.world_size;
  char dir_template[] = "/tmp/kindling-mpi-test-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  const std::string exe(self, static_cast<std::size_t>(len > 0 ? len : 0));
  const std::string script =
      "r=$OMPI_COMM_WORLD_RANK; export KINDLING_TEST_RANK=$r; "
      "\"$@\" >\"$KINDLING_TEST_DIR/out.$r\" 2>\"$KINDLING_TEST_DIR/err.$r\"; rc=$?; "
      "echo $rc >\"$KINDLING_TEST_DIR/status.$r\"; exit $rc";
  std::map<std::string, std::string> env = options.env;
  env.emplace("KINDLING_FLIGHT_RECORD_DIR", dir + "/flight");  // flight records go with the folder
  env["KINDLING_TEST_DIR"] = dir;
  env["KINDLING_TEST_BACKEND"] = options.backend;
  env["KINDLING_TEST_PORT"] = std::to_string(free_port());
  env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
  env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  share_cores(env, n);
  auto launcher = run_command({"/usr/bin/mpirun", "--oversubscribe", "-np", std::to_string(n), "/bin/sh", "-c", script,
                               "sh", exe, "--kindling-worker=" + worker},
                              env, options.deadline);
  std::vector<RankResult> results(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& res = results[static_cast<std::size_t>(r)];
    res.rank = r;
    res.seconds = launcher.seconds;
    res.timed_out = launcher.timed_out;
    res.out = read_file(dir + "/out." + std::to_string(r));
    res.err = read_file(dir + "/err." + std::to_string(r));
    std::ifstream status(dir + "/status." + std::to_string(r));
    if (!(status >> res.exit_code)) res.exit_code = -1;
    if (!launcher.ok()) res.err += "\n[mpirun exit " + std::to_string(launcher.exit_code) + "] " + launcher.err;
  }
  std::string cleanup = "rm -rf '" + dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::cerr << "could not remove " << dir << "\n";
  return results;
}

}  // namespace

std::vector<RankResult> run_workers(const std::string& worker, const LaunchOptions& options) {
  if (options.backend == "mpi") return run_under_mpirun(worker, options);
  const int n = options.world_size;
  const std::string port = std::to_string(free_port());
  char dir_template[] = "/tmp/kindling-test-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  std::vector<pid_t> pids(static_cast<std::size_t>(n));
  std::vector<RankResult> results(static_cast<std::size_t>(n));
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    auto& res = results[static_cast<std::size_t>(r)];
    res.rank = r;
    std::map<std::string, std::string> env;
    if (options.set_dist_env) {
      env = {{"RANK", std::to_string(r)},       {"LOCAL_RANK", std::to_string(r)},
             {"WORLD_SIZE", std::to_string(n)}, {"LOCAL_WORLD_SIZE", std::to_string(n)},
             {"MASTER_ADDR", "127.0.0.1"},      {"MASTER_PORT", port}};
    }
    env["KINDLING_TEST_PORT"] = port;
    env["KINDLING_TEST_RANK"] = std::to_string(r);
    env["KINDLING_TEST_WORLD_SIZE"] = std::to_string(n);
    env["KINDLING_TEST_DIR"] = dir;
    env["KINDLING_TEST_BACKEND"] = options.backend;
    env["KINDLING_FLIGHT_RECORD_DIR"] = dir + "/flight";  // flight records go with the folder
    for (const auto& kv : options.env) env[kv.first] = kv.second;
    if (options.rank_env.count(r))
      for (const auto& kv : options.rank_env.at(r)) env[kv.first] = kv.second;
    if (options.set_dist_env) share_cores(env, n);  // else a launcher runs (run_command), which decides
    std::vector<std::string> args;
    if (options.commands.count(r)) {
      args = options.commands.at(r);
    } else {
      args = {"/proc/self/exe", "--kindling-worker=" + worker};
    }
    const std::string out_path = dir + "/out." + std::to_string(r), err_path = dir + "/err." + std::to_string(r);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      for (const auto& kv : env) {
        if (kv.second.empty())
          ::unsetenv(kv.first.c_str());
        else
          ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
      }
      int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::perror("execv");
      ::_exit(127);
    }
    pids[static_cast<std::size_t>(r)] = pid;
  }
  int remaining = n;
  while (remaining > 0) {
    bool any = false;
    for (int r = 0; r < n; ++r) {
      auto& pid = pids[static_cast<std::size_t>(r)];
      if (pid <= 0) continue;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        auto& res = results[static_cast<std::size_t>(r)];
        res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
        pid = 0;
        --remaining;
        any = true;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() - start > options.deadline) {
      for (int r = 0; r < n; ++r) {
        auto pid = pids[static_cast<std::size_t>(r)];
        if (pid <= 0) continue;
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
        results[static_cast<std::size_t>(r)].timed_out = true;
        results[static_cast<std::size_t>(r)].seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      break;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < n; ++r) {
    auto& res = results[static_cast<std::size_t>(r)];
    res.out = read_file(dir + "/out." + std::to_string(r));
    res.err = read_file(dir + "/err." + std::to_string(r));
  }
  std::string cleanup = "rm -rf '" + dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::cerr << "could not remove " << dir << "\n";
  return results;
}

RankResult run_command(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                       std::chrono::milliseconds deadline) {
  LaunchOptions options;
  options.world_size = 1;
  options.set_dist_env = false;
  options.deadline = deadline;
  options.env = env;
  options.commands[0] = argv;
  return run_workers("", options)[0];
}

std::string describe(const std::vector<RankResult>& results) {
  std::ostringstream out;
  for (const auto& r : results) {
    out << "--- rank " << r.rank << ": exit=" << r.exit_code << " signal=" << r.signal
        << (r.timed_out ? " TIMED OUT (killed)" : "") << " after " << r.seconds << " s\n"
        << "stdout: " << tail(r.out) << "\nstderr: " << tail(r.err) << "\n";
  }
  return out.str();
}

}  // namespace testing
}  // namespace kindling
