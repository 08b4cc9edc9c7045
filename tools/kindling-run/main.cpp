// kindling-run: a torchrun-like launcher for any program (kindling or not).
//
//   kindling-run --nproc_per_node 2 ./train --epochs 3
//   kindling-run --nnodes 2 --node_rank 0 --master_addr 10.0.0.1 --master_port 29500 --nproc_per_node 4 ./train
//   kindling-run --nnodes 2:3 --rdzv_endpoint 10.0.0.1 --rdzv_id job7 --max_restarts 3 --nproc_per_node 4 ./train
//
// Each worker gets torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR,
// MASTER_PORT, OMP_NUM_THREADS unless set) plus KINDLING_RUN=1 and the job's identity KINDLING_RUN_ID. Output lines are
// prefixed with "[rank<r>]:
// ". SIGINT / SIGTERM are forwarded. When a worker fails, the others are stopped (SIGTERM, then SIGKILL after the grace
// period) and a summary names each failed rank. The options: options.h; the elastic agent:
// src/supervisor/agent/elastic_agent.h.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "options.h"
#include "supervisor/process/elastic.h"
#include "supervisor/agent/elastic_agent.h"
#include "supervisor/process/supervisor.h"
#include "supervisor/rendezvous/rendezvous_conf.h"

namespace {

using kindling::supervisor::RoundLayout;
using kindling::supervisor::WorkerSpec;
using kindling_run::Options;

// Resolves the program like execvp would, so that a typo fails before anything starts.
std::optional<std::string> resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), X_OK) == 0) return program;
    return std::nullopt;
  }
  const std::string dirs = kindling::detail::get_env("PATH").value_or("/usr/bin:/bin");
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

// This node's workers with torchrun's variables for the layout.
std::vector<WorkerSpec> make_workers(const Options& o, const RoundLayout& layout) {
  std::vector<WorkerSpec> workers;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    WorkerSpec w;
    w.rank = layout.rank_offset + local;
    w.local_rank = local;
    w.argv = o.program;
    w.env = kindling::supervisor::worker_environment(layout, local, o.nproc_per_node);
    w.env.insert(w.env.end(), {{"ROLE_RANK", std::to_string(w.rank)},
                               {"ROLE_WORLD_SIZE", std::to_string(layout.world_size)},
                               {"ROLE_NAME", "default"},
                               {"KINDLING_RUN", "1"}});
    workers.push_back(std::move(w));
  }
  return workers;
}

int run_elastic(const Options& o, const kindling::supervisor::SupervisorOptions& sup) {
  kindling::supervisor::ElasticAgentOptions agent;
  agent.endpoint_host = o.rdzv_host;
  agent.endpoint_port = o.rdzv_port;
  agent.etcd_endpoints = o.etcd_endpoints;
  agent.live_recovery = o.live_recovery;
  agent.warm_join = o.warm_join;
  agent.nproc_per_node = o.nproc_per_node;
  agent.rendezvous.min_nodes = o.min_nodes;
  agent.rendezvous.max_nodes = o.max_nodes;
  agent.rendezvous.max_restarts = o.max_restarts;
  agent.rendezvous.run_id = o.run_id.empty() ? kindling::supervisor::new_run_id() : o.run_id;
  kindling::supervisor::apply_rdzv_conf(o.rdzv_conf, agent);  // checked by parse()
  return kindling::supervisor::run_elastic_agent(
      agent, [&](const RoundLayout& layout) { return make_workers(o, layout); }, sup);
}

int run_static(Options o, const kindling::supervisor::SupervisorOptions& sup) {
  if (o.standalone) {
    o.master_addr = "127.0.0.1";
    o.master_port = kindling::supervisor::find_free_port();
  }
  RoundLayout layout;
  layout.node_rank = o.node_rank;
  layout.nnodes = o.max_nodes;
  layout.rank_offset = o.node_rank * o.nproc_per_node;
  layout.world_size = o.max_nodes * o.nproc_per_node;
  layout.master_addr = o.master_addr;
  layout.master_port = o.master_port;
  kindling::supervisor::ElasticOptions elastic;
  elastic.max_restarts = o.max_restarts;
  elastic.fresh_port = o.standalone;  // the failed attempt's port may linger
  elastic.run_id = o.run_id;
  const auto result = kindling::supervisor::supervise_elastic(make_workers(o, layout), sup, elastic);
  if (!result.summary.empty()) std::cerr << result.summary;
  return result.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = kindling_run::parse(argc, argv);
  } catch (const kindling_run::UsageError& e) {
    std::cerr << kindling_run::usage_error_text(e);
    return 2;
  }
  if (!resolve(o.program[0])) {
    std::cerr << "kindling-run: cannot execute '" << o.program[0]
              << "': not found or not executable (give a path, or put it on PATH)\n";
    return 2;
  }
  kindling::supervisor::SupervisorOptions sup;
  sup.prefix_output = o.prefix;
  sup.grace_period = std::chrono::milliseconds(static_cast<long long>(o.grace_seconds * 1000));
  sup.name = "kindling-run";
  try {
    return o.elastic ? run_elastic(o, sup) : run_static(o, sup);
  } catch (const std::exception& e) {
    std::cerr << "kindling-run: " << e.what() << "\n";
    return 1;
  }
}
