// Parallel's spawn mode (see spawn.h): this node's ranks under the supervisor, with a fixed
// layout or in elastic rendezvous rounds.
#include "parallel/spawn.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "supervisor/process/elastic.h"
#include "supervisor/agent/elastic_agent.h"
#include "supervisor/process/supervisor.h"
#include "supervisor/rendezvous/rendezvous_conf.h"

namespace kindling {
namespace dist {

namespace {

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::size_t start = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  KINDLING_CHECK_T(LaunchError, n > 0 && !args.empty(),
                   "kindling::dist::Parallel: cannot find this program's path and arguments in /proc/self; use "
                   "StartMethod::kFork or start the program with kindling-run");
  args[0] = std::string(exe, static_cast<std::size_t>(n));
  return args;
}

// One WorkerSpec per local rank: the launcher's variables for `at`, and either this
// program's command line (exec) or a forked entry that initializes, runs fn and finalizes.
std::vector<supervisor::WorkerSpec> worker_specs(const ParallelOptions& o, int index, const supervisor::RoundLayout& at,
                                             const std::function<void(int)>& fn) {
  const int nproc = *o.nproc_per_node();
  std::vector<std::string> argv;
  if (o.start_method() == StartMethod::kExec) argv = own_command_line();
  std::vector<supervisor::WorkerSpec> specs;
  for (int local = 0; local < nproc; ++local) {
    supervisor::WorkerSpec spec;
    spec.rank = at.rank_offset + local;
    spec.local_rank = local;
    spec.env = supervisor::worker_environment(at, local, nproc);
    spec.env.emplace_back("KINDLING_PARALLEL_CHILD", std::to_string(index));
    if (o.start_method() == StartMethod::kExec) {
      spec.argv = argv;
    } else {
      spec.entry = [&o, &fn, local]() -> int {
        try {
          initialize(*o.backend(), parallel_init_options(o));
          fn(local);
          finalize();
        } catch (const std::exception& e) {
          record_error(e);
          log(LogLevel::kError, std::string("kindling::dist::Parallel: the function failed: ") + e.what());
          return 1;
        }
        return 0;
      };
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

supervisor::SupervisorOptions supervisor_options(const ParallelOptions& o) {
  supervisor::SupervisorOptions sup;
  sup.prefix_output = false;
  sup.grace_period = o.grace_period();
  sup.name = "kindling::dist::Parallel";
  return sup;
}

// A fixed layout: this node's ranks, restarted together after a failure.
void spawn_fixed(const ParallelOptions& o, int index, const std::function<void(int)>& fn) {
  const int nproc = *o.nproc_per_node();
  supervisor::RoundLayout at;
  at.node_rank = o.node_rank().value_or(0);
  at.nnodes = o.nnodes().value_or(1);
  at.rank_offset = at.node_rank * nproc;
  at.world_size = at.nnodes * nproc;
  at.master_addr = o.master_addr().value_or("127.0.0.1");
  // One node and no port given: pick a free one, so that concurrent jobs do not collide.
  at.master_port = o.master_port() ? *o.master_port() : (o.init_method() ? 15000 : supervisor::find_free_port());
  const auto specs = worker_specs(o, index, at, fn);
  log(LogLevel::kInfo,
      "kindling::dist::Parallel: starting " + std::to_string(nproc) + " processes (backend '" + *o.backend() +
          "', ranks " + std::to_string(at.rank_offset) + ".." + std::to_string(at.rank_offset + nproc - 1) + " of " +
          std::to_string(at.world_size) + ", " + (o.start_method() == StartMethod::kExec ? "exec" : "fork") +
          ", rendezvous " +
          (o.init_method() ? *o.init_method() : at.master_addr + ":" + std::to_string(at.master_port)) + ")");
  supervisor::ElasticOptions elastic;
  elastic.max_restarts = o.max_restarts();
  elastic.fresh_port = !o.master_port() && !o.init_method();  // the failed attempt's port may linger
  supervisor::SupervisorResult result;
  try {
    result = supervisor::supervise_elastic(specs, supervisor_options(o), elastic);
  } catch (const std::runtime_error& e) {
    throw LaunchError(e.what());
  }
  if (result.exit_code != 0) throw LaunchError(result.summary, result.exit_code);
  if (!result.summary.empty()) log(LogLevel::kInfo, result.summary);
}

// Elastic rounds (rdzv_endpoint): the layout of each round comes from the rendezvous.
void spawn_elastic(const ParallelOptions& o, int index, const std::function<void(int)>& fn) {
  supervisor::ElasticAgentOptions agent;
  if (o.rdzv_backend() == "etcd") {
    const std::string problem = supervisor::parse_etcd_members(*o.rdzv_endpoint(), agent.etcd_endpoints);
    KINDLING_CHECK(problem.empty(), "kindling::dist::Parallel: rdzv_endpoint (etcd members) ", problem);
  } else {
    const std::string problem = supervisor::parse_endpoint(*o.rdzv_endpoint(), agent.endpoint_host, agent.endpoint_port);
    KINDLING_CHECK(problem.empty(), "kindling::dist::Parallel: rdzv_endpoint ", problem);
  }
  agent.live_recovery = o.live_recovery();
  agent.nproc_per_node = *o.nproc_per_node();
  agent.rendezvous.max_nodes = o.nnodes().value_or(1);
  agent.rendezvous.min_nodes = o.min_nnodes().value_or(agent.rendezvous.max_nodes);
  agent.rendezvous.max_restarts = o.max_restarts();
  agent.rendezvous.run_id = o.rdzv_id() ? *o.rdzv_id() : supervisor::new_run_id();
  agent.rendezvous.join_timeout = o.timeout().value_or(std::chrono::seconds(600));
  agent.rendezvous.last_call = o.last_call_timeout();
  agent.rendezvous.name = "kindling::dist::Parallel";
  supervisor::apply_rdzv_conf(o.rdzv_conf(), agent);  // checked with the other options
  int code = 0;
  try {
    code = supervisor::run_elastic_agent(
        agent, [&](const supervisor::RoundLayout& at) { return worker_specs(o, index, at, fn); }, supervisor_options(o));
  } catch (const std::runtime_error& e) {
    throw LaunchError(e.what());
  }
  if (code != 0) {
    throw LaunchError("kindling::dist::Parallel: the elastic job failed on this node (exit status " +
                          std::to_string(code) + "); the rendezvous' and the workers' messages above say why",
                      code);
  }
}

}  // namespace

InitOptions parallel_init_options(const ParallelOptions& o) {
  InitOptions init;
  if (o.init_method()) init.init_method(*o.init_method());
  if (o.timeout()) init.timeout(*o.timeout());
  if (o.stall_timeout()) init.stall_timeout(*o.stall_timeout());
  return init;
}

void spawn_ranks(const ParallelOptions& o, int index, const std::function<void(int)>& fn) {
  if (o.rdzv_endpoint()) return spawn_elastic(o, index, fn);
  spawn_fixed(o, index, fn);
}

}  // namespace dist
}  // namespace kindling
