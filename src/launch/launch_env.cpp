// Launcher detection: a pure function from an environment map to a LaunchEnvironment
// (rules and precedence in include/kindling/dist/launch_env.h).
#include "kindling/dist/launch_env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>
#include <utility>

#include "common/env.h"
#include "common/identity.h"
#include "common/strings.h"
#include "launch/entered_round.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {

namespace {

using ::kindling::detail::join;
using ::kindling::detail::parse_int;

std::optional<std::string> lookup(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::optional<int> lookup_int(const EnvMap& env, const std::string& name) {
  auto v = lookup(env, name);
  if (!v) return std::nullopt;
  return parse_int(*v, "environment variable " + name);
}

int require_int(const EnvMap& env, const std::string& name, const std::string& launcher, const std::string& hint) {
  auto v = lookup_int(env, name);
  KINDLING_CHECK(v.has_value(), "kindling::dist: the ", launcher, " environment is missing ", name, "; ", hint);
  return *v;
}

void check_rank(const LaunchEnvironment& e, const std::string& rank_var, const std::string& size_var) {
  KINDLING_CHECK(e.world_size >= 1, "kindling::dist: ", size_var, "=", e.world_size, " must be at least 1");
  KINDLING_CHECK(e.rank >= 0 && e.rank < e.world_size, "kindling::dist: ", rank_var, "=", e.rank,
                 " is out of range for ", size_var, "=", e.world_size, "; ranks are 0..", e.world_size - 1);
  if (e.local_rank && e.local_world_size) {
    KINDLING_CHECK(*e.local_rank >= 0 && *e.local_rank < *e.local_world_size, "kindling::dist: local rank ",
                   *e.local_rank, " is out of range for ", *e.local_world_size, " processes on this node (", e.launcher,
                   " environment)");
  }
}

// Expands one host-list item that may hold bracket groups: "pre[1-3,07]post".
void expand_item(const std::string& item, const std::string& whole, std::vector<std::string>& out) {
  auto open = item.find('[');
  if (open == std::string::npos) {
    KINDLING_CHECK(item.find(']') == std::string::npos, "hostlist invalid: unbalanced ']' in '", whole, "'");
    if (!item.empty()) out.push_back(item);
    return;
  }
  auto close = item.find(']', open);
  KINDLING_CHECK(close != std::string::npos, "hostlist invalid: unbalanced '[' in '", whole, "'");
  const std::string prefix = item.substr(0, open);
  const std::string ranges = item.substr(open + 1, close - open - 1);
  const std::string rest = item.substr(close + 1);
  KINDLING_CHECK(!ranges.empty(), "hostlist invalid: empty bracket group in '", whole, "'");
  std::set<long long> numbers;
  std::size_t width = 0;
  std::size_t pos = 0;
  while (pos <= ranges.size()) {
    auto comma = ranges.find(',', pos);
    std::string range = ranges.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? ranges.size() + 1 : comma + 1;
    auto dash = range.find('-');
    std::string first = range.substr(0, dash);
    std::string last = dash == std::string::npos ? first : range.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() < 18 &&
             std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
    };
    KINDLING_CHECK(digits(first) && digits(last), "hostlist invalid: '", range, "' is not a number or a range a-b in '",
                   whole, "'");
    long long a = std::stoll(first), b = std::stoll(last);
    KINDLING_CHECK(a <= b, "hostlist invalid: range ", range, " runs backwards in '", whole, "'");
    KINDLING_CHECK(b - a < 100000, "hostlist invalid: range ", range, " is too large in '", whole, "'");
    if (first.size() > 1 && first[0] == '0') width = std::max(width, first.size());
    for (long long n = a; n <= b; ++n) numbers.insert(n);
  }
  for (long long n : numbers) {
    std::string digits = std::to_string(n);
    if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
    std::vector<std::string> tails;
    expand_item(rest, whole, tails);
    if (tails.empty()) tails.push_back("");
    for (const auto& t : tails) out.push_back(prefix + digits + t);
  }
}

LaunchEnvironment from_slurm(const EnvMap& env) {
  LaunchEnvironment e;
  e.launcher = "slurm";
  const std::string hint =
      "run the program as a Slurm task (srun, or srun inside an sbatch script), not directly in the batch script";
  for (const char* name :
       {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES"}) {
    KINDLING_CHECK(lookup(env, name).has_value(), "kindling::dist: Slurm job ",
                   lookup(env, "SLURM_JOB_ID").value_or(""), " is missing ", name, " in the environment; ", hint);
  }
  e.rank = require_int(env, "SLURM_PROCID", "Slurm", hint);
  e.local_rank = require_int(env, "SLURM_LOCALID", "Slurm", hint);
  e.world_size = require_int(env, "SLURM_NTASKS", "Slurm", hint);
  const int job_nodes = require_int(env, "SLURM_JOB_NUM_NODES", "Slurm", hint);
  e.nnodes = lookup_int(env, "SLURM_STEP_NUM_NODES");
  if (!e.nnodes) e.nnodes = lookup_int(env, "SLURM_NNODES");
  if (!e.nnodes) e.nnodes = job_nodes;
  e.node_rank = lookup_int(env, "SLURM_NODEID");
  if (auto tpn = lookup(env, "SLURM_STEP_TASKS_PER_NODE"); tpn && e.node_rank) {
    auto counts = expand_tasks_per_node(*tpn);
    if (static_cast<std::size_t>(*e.node_rank) < counts.size())
      e.local_world_size = counts[static_cast<std::size_t>(*e.node_rank)];
  }
  // A torchrun-style launcher inside the Slurm task (idist's "PTH vars").
  const std::vector<std::string> pth{"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> present, missing;
  for (const auto& v : pth) (lookup(env, v) ? present : missing).push_back(v);
  if (missing.empty()) {
    const int rank = *lookup_int(env, "RANK");
    const int local = *lookup_int(env, "LOCAL_RANK");
    const int ws = *lookup_int(env, "WORLD_SIZE");
    const std::string both = std::string(" (RANK=") + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(local) +
                             " WORLD_SIZE=" + std::to_string(ws) + " vs SLURM_PROCID=" + std::to_string(e.rank) +
                             " SLURM_LOCALID=" + std::to_string(*e.local_rank) +
                             " SLURM_NTASKS=" + std::to_string(e.world_size) + ")";
    if (job_nodes > 1) {
      KINDLING_CHECK(rank == e.rank && local == *e.local_rank && ws == e.world_size,
                     "kindling::dist: the torchrun-style variables are inconsistent with the Slurm ones", both,
                     ". On several nodes they must be equal: start one Slurm task per process (srun --ntasks-per-node"
                     "=N) instead of a launcher per node");
    } else {
      KINDLING_CHECK(rank >= e.rank && local >= *e.local_rank && ws >= e.world_size,
                     "kindling::dist: the torchrun-style variables are inconsistent with the Slurm ones", both,
                     ". A launcher inside one Slurm task must start at least as many processes as Slurm tasks");
      e.rank = rank;
      e.local_rank = local;
      e.world_size = ws;
      e.local_world_size = lookup_int(env, "LOCAL_WORLD_SIZE");
      e.node_rank = lookup_int(env, "GROUP_RANK");
      if (!e.node_rank) e.node_rank = 0;
    }
    e.master_addr = lookup(env, "MASTER_ADDR");
    e.master_port = lookup_int(env, "MASTER_PORT");
  } else if (!present.empty()) {
    e.warnings.push_back("found " + join(present) + " but not " + join(missing) +
                         " beside Slurm's variables; they are ignored and Slurm's are used");
  }
  if (!e.master_addr) {
    const std::string list = *lookup(env, "SLURM_JOB_NODELIST");
    std::vector<std::string> hosts;
    try {
      hosts = expand_hostlist(list);
    } catch (const Error& err) {
      KINDLING_CHECK(false, "kindling::dist: no host name found in SLURM_JOB_NODELIST (nodelist=", list,
                     "): ", err.what());
    }
    KINDLING_CHECK(!hosts.empty(), "kindling::dist: no host name found in SLURM_JOB_NODELIST (nodelist=", list, ")");
    e.master_addr = hosts.front();
  }
  if (!e.master_port) {
    const std::string job = *lookup(env, "SLURM_JOB_ID");
    const std::string tail = job.size() > 4 ? job.substr(job.size() - 4) : job;
    e.master_port = 15000 + parse_int(tail, "the last digits of SLURM_JOB_ID");
  }
  check_rank(e, "SLURM_PROCID", "SLURM_NTASKS");
  return e;
}

LaunchEnvironment from_torch_env(const EnvMap& env) {
  LaunchEnvironment e;
  auto rank = lookup(env, "RANK");
  auto ws = lookup(env, "WORLD_SIZE");
  KINDLING_CHECK(rank.has_value() == ws.has_value(), "kindling::dist: incomplete distributed environment: ",
                 rank ? "RANK is set (" + *rank + ") but WORLD_SIZE is not"
                      : "WORLD_SIZE is set (" + ws.value_or("") + ") but RANK is not",
                 ". Set RANK and WORLD_SIZE (and optionally LOCAL_RANK) together, or none of them");
  if (lookup(env, "KINDLING_PARALLEL_CHILD")) {
    e.launcher = "parallel";
  } else if (lookup(env, "KINDLING_RUN")) {
    e.launcher = "kindling-run";
  } else if (lookup(env, "TORCHELASTIC_RUN_ID")) {
    e.launcher = "torchrun";
  } else {
    e.launcher = "env";
  }
  e.rank = *lookup_int(env, "RANK");
  e.world_size = *lookup_int(env, "WORLD_SIZE");
  e.local_rank = lookup_int(env, "LOCAL_RANK");
  e.local_world_size = lookup_int(env, "LOCAL_WORLD_SIZE");
  e.node_rank = lookup_int(env, "GROUP_RANK");
  e.nnodes = lookup_int(env, "GROUP_WORLD_SIZE");
  e.master_addr = lookup(env, "MASTER_ADDR");
  e.master_port = lookup_int(env, "MASTER_PORT");
  check_rank(e, "RANK", "WORLD_SIZE");
  if (e.local_rank) {
    KINDLING_CHECK(*e.local_rank >= 0 && *e.local_rank <= e.rank, "kindling::dist: LOCAL_RANK=", *e.local_rank,
                   " must be between 0 and RANK (", e.rank, ")");
  }
  return e;
}

// Rendezvous address for launchers that do not give one (mpirun, horovodrun).
void single_node_master(LaunchEnvironment& e, const EnvMap& env, const std::string& launcher_hint) {
  e.master_addr = lookup(env, "MASTER_ADDR");
  e.master_port = lookup_int(env, "MASTER_PORT");
  const bool one_node = e.local_world_size && *e.local_world_size == e.world_size;
  if (!e.master_addr && one_node) e.master_addr = "127.0.0.1";
  if (!e.master_addr) {
    e.master_addr_missing = "kindling::dist: " + e.launcher + " started " + std::to_string(e.world_size) +
                            " processes on several nodes, and kindling cannot tell where rank 0 runs: export "
                            "MASTER_ADDR=<host of rank 0> and MASTER_PORT=<free port> " + launcher_hint +
                            ", or use the mpi backend, which needs neither";
  }
}

// Reads <prefix>RANK / SIZE (required) and <prefix>LOCAL_RANK / LOCAL_SIZE (optional).
void read_ranks(LaunchEnvironment& e, const EnvMap& env, const std::string& prefix, const std::string& rank,
                const std::string& size, const std::string& launcher) {
  const std::string hint = launcher + " sets " + prefix + rank + " and " + prefix + size + " together";
  e.rank = require_int(env, prefix + rank, launcher, hint);
  e.world_size = require_int(env, prefix + size, launcher, hint);
  e.local_rank = lookup_int(env, prefix + "LOCAL_" + rank);
  e.local_world_size = lookup_int(env, prefix + "LOCAL_" + size);
}

LaunchEnvironment from_horovod(const EnvMap& env) {
  LaunchEnvironment e;
  e.launcher = "horovod";
  read_ranks(e, env, "HOROVOD_", "RANK", "SIZE", "horovodrun");
  e.node_rank = lookup_int(env, "HOROVOD_CROSS_RANK");
  e.nnodes = lookup_int(env, "HOROVOD_CROSS_SIZE");
  if (e.nnodes && *e.nnodes == 1 && !e.local_world_size) e.local_world_size = e.world_size;
  auto addr = lookup(env, "HOROVOD_GLOO_RENDEZVOUS_ADDR");
  if (!lookup(env, "MASTER_ADDR") && addr && !(e.local_world_size && *e.local_world_size == e.world_size)) {
    e.master_addr = addr;
    e.warnings.push_back("rendezvous at horovodrun's host " + *addr +
                         "; this assumes rank 0 runs there (export MASTER_ADDR otherwise)");
    e.master_port = lookup_int(env, "MASTER_PORT");
  } else {
    single_node_master(e, env, "(horovodrun -x MASTER_ADDR -x MASTER_PORT ...)");
  }
  if (!e.master_port) {
    if (auto p = lookup_int(env, "HOROVOD_GLOO_RENDEZVOUS_PORT"); p && *p + 1 < 65536) e.master_port = *p + 1;
  }
  check_rank(e, "HOROVOD_RANK", "HOROVOD_SIZE");
  return e;
}

LaunchEnvironment from_open_mpi(const EnvMap& env) {
  LaunchEnvironment e;
  e.launcher = "mpirun";
  read_ranks(e, env, "OMPI_COMM_WORLD_", "RANK", "SIZE", "mpirun");
  // OMPI_COMM_WORLD_NODE_RANK is a rank within the node (across jobs), not a node index;
  // the node index follows from the layout (ranks of one node are contiguous with
  // mpirun's default --map-by slot).
  single_node_master(e, env, "(mpirun -x MASTER_ADDR -x MASTER_PORT ...)");
  if (!e.master_port) {
    auto job = lookup(env, "OMPI_MCA_ess_base_jobid");
    if (!job) job = lookup(env, "PMIX_NAMESPACE");
    if (job && !job->empty() && job->size() < 19 &&
        std::all_of(job->begin(), job->end(), [](unsigned char c) { return std::isdigit(c); })) {
      // Below 32768, where Linux's ephemeral ports begin (net.ipv4.ip_local_port_range's default):
      // a port in that range can be any outgoing connection's source port on this host when rank
      // 0 binds it (seen: EADDRINUSE under ctest -j2).
      e.master_port = 20000 + static_cast<int>((std::stoll(*job) >> 16) % 12768);
    }
  }
  check_rank(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  return e;
}

LaunchEnvironment from_pmix(const EnvMap& env) {
  LaunchEnvironment e;
  e.launcher = "pmix";
  e.rank = require_int(env, "PMIX_RANK", "PMIx", "");
  auto size = lookup_int(env, "OMPI_APP_CTX_NUM_PROCS");
  KINDLING_CHECK(size.has_value(), "kindling::dist: PMIX_RANK=", e.rank,
                 " is set but the world size is unknown (no OMPI_APP_CTX_NUM_PROCS); export WORLD_SIZE and RANK, "
                 "or start the program with mpirun, srun or kindling-run");
  e.world_size = *size;
  e.master_addr = lookup(env, "MASTER_ADDR");
  e.master_port = lookup_int(env, "MASTER_PORT");
  check_rank(e, "PMIX_RANK", "OMPI_APP_CTX_NUM_PROCS");
  return e;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& nodelist) {
  std::string text;
  for (char c : nodelist) {
    if (!std::isspace(static_cast<unsigned char>(c))) text += c;
  }
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      expand_item(item, nodelist, out);
      item.clear();
    } else {
      item += c;
    }
  }
  expand_item(item, nodelist, out);
  return out;
}

std::vector<int> expand_tasks_per_node(const std::string& text) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() : comma + 1;
    int repeat = 1;
    auto paren = item.find("(x");
    if (paren != std::string::npos) {
      KINDLING_CHECK(item.back() == ')', "kindling::dist: malformed tasks-per-node item '", item, "' in '", text, "'");
      repeat = parse_int(item.substr(paren + 2, item.size() - paren - 3), "the repeat count in '" + text + "'");
      item = item.substr(0, paren);
    }
    const int count = parse_int(item, "a task count in '" + text + "'");
    KINDLING_CHECK(count >= 0 && repeat >= 1 && repeat <= 100000, "kindling::dist: malformed tasks-per-node '", text,
                   "'");
    out.insert(out.end(), static_cast<std::size_t>(repeat), count);
  }
  return out;
}

LaunchEnvironment detect_launch_environment(const EnvMap& env) {
  const bool inner_mpi = lookup(env, "OMPI_COMM_WORLD_RANK").has_value();
  const bool inner_horovod = lookup(env, "HOROVOD_RANK").has_value();
  if (lookup(env, "SLURM_JOB_ID") && !inner_mpi && !inner_horovod) {
    const bool in_step = lookup(env, "SLURM_STEP_ID") || lookup(env, "SLURM_STEPID");
    if (in_step) return from_slurm(env);
    // A batch script or an salloc shell: Slurm's task variables describe the allocation,
    // not this process. A launcher started inside it (kindling-run, torchrun) is fine.
    if (!lookup(env, "RANK") && !lookup(env, "WORLD_SIZE")) {
      const int ntasks = lookup_int(env, "SLURM_NTASKS").value_or(1);
      KINDLING_CHECK(ntasks <= 1, "kindling::dist: this process runs in the batch step of Slurm job ",
                     *lookup(env, "SLURM_JOB_ID"), " (no SLURM_STEP_ID), not as one of its ", ntasks,
                     " tasks: start it with `srun ./program` inside the batch script (or with kindling-run)");
      LaunchEnvironment single;
      single.warnings.push_back("running in a Slurm batch step with one task: a single process");
      return single;
    }
  }
  const auto rank = lookup(env, "RANK"), world_size = lookup(env, "WORLD_SIZE");
  if (rank && world_size) return from_torch_env(env);
  if ((rank || world_size) && (inner_horovod || inner_mpi)) {
    // Half of torch's pair, left in the shell, under a launcher that gives every rank its
    // own numbers: the launcher wins, and the user hears about the stray variable.
    LaunchEnvironment e = inner_horovod ? from_horovod(env) : from_open_mpi(env);
    e.warnings.push_back(std::string(rank ? "RANK=" + *rank : "WORLD_SIZE=" + *world_size) + " is set without " +
                         (rank ? "WORLD_SIZE" : "RANK") + " and ignored: the ranks come from " + e.launcher +
                         " (rank " + std::to_string(e.rank) + " of " + std::to_string(e.world_size) +
                         "); unset it, or set both RANK and WORLD_SIZE to override " + e.launcher);
    return e;
  }
  if (rank || world_size) return from_torch_env(env);
  if (inner_horovod || lookup(env, "HOROVOD_SIZE")) return from_horovod(env);
  if (inner_mpi || lookup(env, "OMPI_COMM_WORLD_SIZE")) return from_open_mpi(env);
  if (lookup(env, "PMIX_RANK")) return from_pmix(env);
  // LOCAL_RANK alone is kept as a hint; initialize() rejects it with env://.
  LaunchEnvironment none;
  none.local_rank = lookup_int(env, "LOCAL_RANK");
  return none;
}

EnvMap current_environment() {
  EnvMap env;
  for (const std::string& entry : ::kindling::detail::snapshot_env()) {  // read in one piece (common/env.h)
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  // After a rejoin, the round it entered is this process's place (entered_round.h).
  if (const auto round = detail::entered_round()) {
    int local = 0, nproc = 1;
    if (const auto v = lookup(env, "LOCAL_RANK")) local = std::atoi(v->c_str());
    if (const auto v = lookup(env, "LOCAL_WORLD_SIZE")) nproc = std::atoi(v->c_str());
    for (auto& [name, value] : detail::entered_round_variables(*round, local, nproc)) env[name] = value;
  }
  return env;
}

LaunchEnvironment detect_launch_environment() { return detect_launch_environment(current_environment()); }

namespace {

// The launcher's (rank, world size) for common/identity.h's process_identity(), which the
// lowest floor cannot compute itself: nullopt with no launcher; throws for inconsistent
// variables (detect_launch_environment's UsageError).
std::optional<std::pair<int, int>> launcher_identity() {
  const LaunchEnvironment launch = detect_launch_environment();
  if (!launch.detected()) return std::nullopt;
  return std::make_pair(launch.rank, launch.world_size);
}

// Installs it while the library loads, before any program code can ask.
struct InstallLauncherIdentity {
  InstallLauncherIdentity() { ::kindling::detail::set_launcher_identity(&launcher_identity); }
} g_install_launcher_identity;

}  // namespace

}  // namespace dist
}  // namespace kindling
