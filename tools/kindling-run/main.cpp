// kindling-run: a torchrun-like launcher for any program (kindling or not).
//
//   kindling-run --nproc_per_node 2 ./train --epochs 3
//   kindling-run --nnodes 2 --node_rank 0 --master_addr 10.0.0.1 --master_port 29500 --nproc_per_node 4 ./train
//
// Each worker gets torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR,
// MASTER_PORT) plus KINDLING_RUN=1 and the job's identity KINDLING_RUN_ID. Output lines are prefixed with "[rank<r>]: ".
// SIGINT / SIGTERM are forwarded. When a worker fails, the others are stopped (SIGTERM,
// then SIGKILL after the grace period) and a summary names each failed rank.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/elastic.h"
#include "supervisor/supervisor.h"

namespace {

const char* kUsage =
    "usage: kindling-run [options] program [args...]\n"
    "\n"
    "Starts nproc_per_node copies of program on this node with torchrun's environment.\n"
    "\n"
    "options (also spelled with '-' instead of '_', and as --name=value):\n"
    "  --nproc_per_node N   processes on this node (default 1)\n"
    "  --nnodes N           nodes in the job (default 1)\n"
    "  --node_rank R        index of this node, 0..nnodes-1 (default 0)\n"
    "  --master_addr A      address of node 0, where rank 0 hosts the rendezvous (default 127.0.0.1)\n"
    "  --master_port P      rendezvous port (default 29500)\n"
    "  --standalone         one node, rendezvous on a free local port\n"
    "  --grace_period S     seconds between SIGTERM and SIGKILL when stopping workers (default 3)\n"
    "  --max_restarts N     when a worker fails, stop all and start them all again, at most N times\n"
    "                       (default 0); workers see the attempt in TORCHELASTIC_RESTART_COUNT\n"
    "  --rdzv_id ID         the job's identity, the same in each restart (KINDLING_RUN_ID in the workers;\n"
    "                       default: a new unique one). On several nodes give every node the same ID\n"
    "  --no_prefix          relay output lines without the \"[rank<r>]: \" prefix\n"
    "  --no_python          accepted for torchrun compatibility (programs always run directly)\n"
    "  -h, --help           this text\n"
    "\n"
    "Each worker gets TORCHELASTIC_ERROR_FILE; a failure's report ends with the first failure recorded\n"
    "there (rank, time, message).\n"
    "\n"
    "Exit status: 0 when every worker exits 0; else the exit code of the first worker that failed\n"
    "(128 + signal number for a signal); 2 for bad options.\n";

// More workers than this on one node is a typo or a runaway script, not a job.
constexpr int kMaxProcPerNode = 1024;

struct UsageError {
  std::string message;
};

// Not kindling::detail::parse_int (src/common/env.h): kindling-run links only kindling_supervisor, not the
// LibTorch-based kindling library (so that it starts fast), and parse_int is an unexported internal of that library.
int parse_number(const std::string& flag, const std::string& value) {
  if (value.empty() || value.size() > 9 ||
      !std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isdigit(c); })) {
    throw UsageError{"kindling-run: " + flag + " expects a non-negative integer, got '" + value + "'" +
                     (value.find(':') != std::string::npos ? " (elastic ranges such as 1:4 are not supported)" : "")};
  }
  return std::stoi(value);
}

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  bool prefix = true;
  double grace_seconds = 3;
  int max_restarts = 0;
  std::string run_id;  // empty: supervise_elastic makes one
  bool addr_given = false, port_given = false;
  std::vector<std::string> program;
};

// One option of the command line: `take()` gives its value (from "=value" or the next
// argument), `flag_only()` refuses one. Throws UsageError for an unknown option.
void set_option(Options& o, const std::string& arg, const std::string& name, const std::function<std::string()>& take,
                const std::function<void()>& flag_only) {
  if (name == "--nproc_per_node") {
    o.nproc_per_node = parse_number(name, take());
  } else if (name == "--nnodes") {
    o.nnodes = parse_number(name, take());
  } else if (name == "--node_rank") {
    o.node_rank = parse_number(name, take());
  } else if (name == "--master_addr") {
    o.master_addr = take();
    o.addr_given = true;
  } else if (name == "--master_port") {
    o.master_port = parse_number(name, take());
    o.port_given = true;
  } else if (name == "--grace_period") {
    const std::string v = take();
    char* end = nullptr;
    o.grace_seconds = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || o.grace_seconds < 0) {
      throw UsageError{"kindling-run: --grace_period expects seconds (a non-negative number), got '" + v + "'"};
    }
  } else if (name == "--max_restarts") {
    o.max_restarts = parse_number(name, take());
  } else if (name == "--rdzv_id") {
    o.run_id = take();
    if (o.run_id.empty() || o.run_id == "none")
      throw UsageError{"kindling-run: --rdzv_id needs a non-empty identity other than 'none', got '" + o.run_id + "'"};
  } else if (name == "--standalone") {
    flag_only();
    o.standalone = true;
  } else if (name == "--no_prefix") {
    flag_only();
    o.prefix = false;
  } else if (name == "--no_python") {
    flag_only();
  } else {
    throw UsageError{"kindling-run: unknown option '" + arg + "'"};
  }
}

// The options together: ranges and combinations. Throws UsageError.
void check(const Options& o) {
  if (o.program.empty()) throw UsageError{"kindling-run: no program given; put it after the options"};
  if (o.nproc_per_node < 1) throw UsageError{"kindling-run: --nproc_per_node must be at least 1"};
  if (o.nproc_per_node > kMaxProcPerNode) {
    throw UsageError{"kindling-run: --nproc_per_node " + std::to_string(o.nproc_per_node) + " is more than " +
                     std::to_string(kMaxProcPerNode) + " processes on one node; use at most one per core or GPU"};
  }
  if (o.nnodes < 1) throw UsageError{"kindling-run: --nnodes must be at least 1"};
  if (o.node_rank >= o.nnodes) {
    throw UsageError{"kindling-run: --node_rank " + std::to_string(o.node_rank) + " is out of range for --nnodes " +
                     std::to_string(o.nnodes) + " (use 0.." + std::to_string(o.nnodes - 1) + ")"};
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    throw UsageError{"kindling-run: --master_port must be between 1 and 65535, got " + std::to_string(o.master_port)};
  }
  if (o.standalone) {
    if (o.nnodes != 1)
      throw UsageError{"kindling-run: --standalone runs one node; it cannot be combined with --nnodes " +
                       std::to_string(o.nnodes)};
    if (o.addr_given || o.port_given) {
      throw UsageError{
          "kindling-run: --standalone picks the rendezvous address itself; drop --master_addr/--master_port"};
    }
  }
  if (o.nnodes > 1 && !o.addr_given) {
    throw UsageError{"kindling-run: --nnodes " + std::to_string(o.nnodes) +
                     " needs --master_addr, the address of node 0 that every node can reach (the default "
                     "127.0.0.1 only works on one node)"};
  }
}

// torchrun's spellings: "--name value" or "--name=value", dashes or underscores inside the
// name; the program and its arguments follow the options (or "--").
Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("-", 0) != 0) break;  // the program
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    }
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    std::replace(name.begin() + 2, name.end(), '-', '_');
    auto take = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw UsageError{"kindling-run: " + name + " needs a value"};
      return argv[++i];
    };
    auto flag_only = [&]() {
      if (has_value) throw UsageError{"kindling-run: " + name + " takes no value"};
    };
    set_option(o, arg, name, take, flag_only);
  }
  for (; i < argc; ++i) o.program.push_back(argv[i]);
  check(o);
  return o;
}

// Resolves the program like execvp would, so that a typo fails before anything starts.
std::optional<std::string> resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), X_OK) == 0) return program;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    auto colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    start = colon == std::string::npos ? dirs.size() + 1 : colon + 1;
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << e.message << "\n\n" << kUsage;
    return 2;
  }
  if (!resolve(o.program[0])) {
    std::cerr << "kindling-run: cannot execute '" << o.program[0]
              << "': not found or not executable (give a path, or put it on PATH)\n";
    return 2;
  }
  if (o.standalone) {
    o.master_addr = "127.0.0.1";
    try {
      o.master_port = kindling::launch::find_free_port();
    } catch (const std::exception& e) {
      std::cerr << "kindling-run: " << e.what() << "\n";
      return 1;
    }
  }
  const int world = o.nnodes * o.nproc_per_node;
  const bool omp_set = std::getenv("OMP_NUM_THREADS") != nullptr;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string omp_threads = std::to_string(std::max(1u, cores / static_cast<unsigned>(o.nproc_per_node)));

  std::vector<kindling::launch::WorkerSpec> workers;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    kindling::launch::WorkerSpec w;
    w.rank = o.node_rank * o.nproc_per_node + local;
    w.local_rank = local;
    w.argv = o.program;
    w.env = {{"RANK", std::to_string(w.rank)},
             {"LOCAL_RANK", std::to_string(local)},
             {"WORLD_SIZE", std::to_string(world)},
             {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
             {"GROUP_RANK", std::to_string(o.node_rank)},
             {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
             {"ROLE_RANK", std::to_string(w.rank)},
             {"ROLE_WORLD_SIZE", std::to_string(world)},
             {"ROLE_NAME", "default"},
             {"MASTER_ADDR", o.master_addr},
             {"MASTER_PORT", std::to_string(o.master_port)},
             {"KINDLING_RUN", "1"}};
    // Share the cores between the workers unless the user decided (torchrun sets 1).
    if (!omp_set) w.env.emplace_back("OMP_NUM_THREADS", omp_threads);
    workers.push_back(std::move(w));
  }
  kindling::launch::SupervisorOptions sup;
  sup.prefix_output = o.prefix;
  sup.grace_period = std::chrono::milliseconds(static_cast<long long>(o.grace_seconds * 1000));
  sup.name = "kindling-run";
  kindling::launch::ElasticOptions elastic;
  elastic.max_restarts = o.max_restarts;
  elastic.fresh_port = o.standalone;  // the failed attempt's port may linger
  elastic.run_id = o.run_id;
  kindling::launch::SupervisorResult result;
  try {
    result = kindling::launch::supervise_elastic(workers, sup, elastic);
  } catch (const std::exception& e) {
    std::cerr << "kindling-run: " << e.what() << "\n";
    return 1;
  }
  if (!result.summary.empty()) std::cerr << result.summary;
  return result.exit_code;
}
