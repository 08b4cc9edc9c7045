// kindling-run's command line (see options.h).
#include "options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <iostream>

#include "common/env.h"
#include "supervisor/agent/elastic_agent.h"
#include "supervisor/rendezvous/rendezvous_conf.h"

namespace kindling_run {

const char* const kUsage =
    "usage: kindling-run [options] program [args...]\n"
    "\n"
    "Starts nproc_per_node copies of program on this node with torchrun's environment.\n"
    "\n"
    "options (also spelled with '-' instead of '_', and as --name=value):\n"
    "  --nproc_per_node N   processes on this node (default 1)\n"
    "  --nnodes N|MIN:MAX   nodes in the job (default 1); MIN:MAX is elastic: see below\n"
    "  --node_rank R        index of this node, 0..nnodes-1 (default 0; static rendezvous only)\n"
    "  --master_addr A      address of node 0, where rank 0 hosts the rendezvous (default 127.0.0.1)\n"
    "  --master_port P      rendezvous port (default 29500)\n"
    "  --standalone         one node, rendezvous on a free local port\n"
    "  --grace_period S     seconds between SIGTERM and SIGKILL when stopping workers (default 3)\n"
    "  --max_restarts N     when a worker fails, stop all and start them all again, at most N times\n"
    "                       (default 0); workers see the attempt in TORCHELASTIC_RESTART_COUNT; on\n"
    "                       several nodes with --rdzv_endpoint only (it restarts every node together)\n"
    "  --rdzv_id ID         the job's identity, the same in each restart (KINDLING_RUN_ID in the workers;\n"
    "                       default: a new unique one). On several nodes give every node the same ID\n"
    "  --rdzv_endpoint H[:P] elastic rendezvous at host H, port P (default 29400); the node that owns\n"
    "                       address H serves it and must stay up. With etcd: the cluster's members,\n"
    "                       H1[:P1],H2[:P2],... (default port 2379)\n"
    "  --rdzv_backend B     c10d (elastic, the default with --rdzv_endpoint), etcd (elastic; the agents\n"
    "                       elect the one that serves the rounds in an etcd cluster, and another takes\n"
    "                       over when its host is lost: no node must stay up) or static (--master_addr)\n"
    "  --rdzv_conf K=V,...  join_timeout=S (default 600): a round fails with fewer than MIN nodes after S;\n"
    "                       last_call_timeout=S (default 30): a round of MIN or more waits S for more;\n"
    "                       keep_alive_interval=S (default 1): an agent asks the rendezvous every S\n"
    "                       while its workers run; keep_alive_max_attempt=N (default 3): an agent silent\n"
    "                       for N intervals is gone (its host stopped or cut off); takeover_wait=S\n"
    "                       (default 5): an agent that took over serving the rounds waits up to S for\n"
    "                       the running round's nodes; lease=N (default 5, etcd): a serving agent that\n"
    "                       is unreachable keeps its place N whole seconds (one whose port refuses\n"
    "                       connections is replaced at once)\n"
    "  --live_recovery      elastic: when a node is lost or arrives, keep the workers running; they make\n"
    "                       the new world in the same processes (kindling::dist::rejoin, the Engine's\n"
    "                       LiveRecovery) instead of being restarted; see docs/fault-tolerance.md\n"
    "  --warm_join          with --live_recovery: start this node's workers before it joins; it joins\n"
    "                       once they wait in kindling::dist::initialize(), so the running nodes train\n"
    "                       on while its programs load (for programs that initialize)\n"
    "  --no_prefix          relay output lines without the \"[rank<r>]: \" prefix\n"
    "  --no_python          accepted for torchrun compatibility (programs always run directly)\n"
    "  -h, --help           this text\n"
    "\n"
    "Elastic (--nnodes MIN:MAX --rdzv_endpoint H --rdzv_id ID on every node): each (re)start is a\n"
    "rendezvous round of the agents that are up; a round closes at MAX nodes, or at MIN or more after\n"
    "the last call; node ranks follow the last round's order, new nodes last. When workers fail anywhere,\n"
    "every node stops its workers and joins the next round (one restart of --max_restarts); a node that\n"
    "does not come back is left out; a node that arrives makes the running nodes join a new round (not\n"
    "counted as a restart). Fewer than MIN nodes within join_timeout ends the job, naming the hosts lost.\n"
    "\n"
    "Each worker gets TORCHELASTIC_ERROR_FILE; a failure's report ends with the first failure recorded\n"
    "there (rank, time, message).\n"
    "\n"
    "Exit status: 0 when every worker exits 0; else the exit code of the first worker that failed\n"
    "(128 + signal number for a signal); 2 for bad options.\n";

namespace {

// More workers than this on one node is a typo or a runaway script, not a job.
constexpr int kMaxProcPerNode = 1024;

// kindling's parse_int (common/env.h, in kindling_common, which kindling-run links without the
// LibTorch-based library), limited to what a count, rank or port can be.
int parse_number(const std::string& flag, const std::string& value) {
  int number = -1;
  try {
    if (!value.empty() && std::isdigit(static_cast<unsigned char>(value[0])))
      number = ::kindling::detail::parse_int(value, flag);
  } catch (const kindling::Error&) {
    number = -1;  // not a whole number in int's range: refused below with the option's own words
  }
  if (number < 0) {
    throw UsageError{"kindling-run: " + flag + " expects a non-negative integer, got '" + value + "'" +
                     (value.find(':') != std::string::npos && flag != "--nnodes"
                          ? " (only --nnodes takes an elastic range MIN:MAX)"
                          : "")};
  }
  return number;
}

// --grace_period: kindling's reading of seconds (common/env.h), refused in kindling-run's words.
double parse_seconds(const std::string& what, const std::string& value) {
  const auto s = ::kindling::detail::parse_seconds(value);
  if (!s) {
    throw UsageError{"kindling-run: " + what + " expects seconds (a number from 0 to " +
                     std::to_string(static_cast<long long>(::kindling::detail::kMaxSeconds)) +
                     ", about 115 days), got '" + value + "'"};
  }
  return *s;
}

// --nnodes N or MIN:MAX.
void set_nnodes(Options& o, const std::string& value) {
  const auto colon = value.find(':');
  if (colon == std::string::npos) {
    o.min_nodes = o.max_nodes = parse_number("--nnodes", value);
    return;
  }
  o.min_nodes = parse_number("--nnodes (MIN of MIN:MAX)", value.substr(0, colon));
  o.max_nodes = parse_number("--nnodes (MAX of MIN:MAX)", value.substr(colon + 1));
  o.elastic = true;
}

// --rdzv_conf K=V,...: checked here, applied to the agent's options by main (rendezvous_conf.h).
void add_rdzv_conf(Options& o, const std::string& value) {
  kindling::supervisor::ElasticAgentOptions scratch;
  const std::string problem = kindling::supervisor::apply_rdzv_conf(value, scratch);
  if (!problem.empty()) throw UsageError{"kindling-run: --rdzv_conf: " + problem};
  o.rdzv_conf += (o.rdzv_conf.empty() ? "" : ",") + value;
}

// --rdzv_endpoint: one host[:port], or with etcd the members host[:port],... (port 2379 by default).
void set_endpoint(Options& o, const std::string& text, bool etcd) {
  if (!etcd) {
    const std::string problem = kindling::supervisor::parse_endpoint(text, o.rdzv_host, o.rdzv_port);
    if (!problem.empty()) throw UsageError{"kindling-run: --rdzv_endpoint " + problem};
    return;
  }
  const std::string problem = kindling::supervisor::parse_etcd_members(text, o.etcd_endpoints);
  if (!problem.empty()) throw UsageError{"kindling-run: --rdzv_endpoint (etcd members) " + problem};
  int port = 0;  // the first member's host marks the job elastic (rdzv_host); its port is etcd's
  if (o.rdzv_host.empty()) kindling::supervisor::parse_endpoint(o.etcd_endpoints.front(), o.rdzv_host, port);
}

// One option of the command line: `take()` gives its value (from "=value" or the next
// argument), `flag_only()` refuses one. Throws UsageError for an unknown option.
void set_option(Options& o, const std::string& arg, const std::string& name, const std::function<std::string()>& take,
                const std::function<void()>& flag_only, std::string& backend, std::string& endpoint) {
  if (name == "--nproc_per_node") {
    o.nproc_per_node = parse_number(name, take());
  } else if (name == "--nnodes") {
    set_nnodes(o, take());
  } else if (name == "--node_rank") {
    o.node_rank = parse_number(name, take());
    o.node_rank_given = true;
  } else if (name == "--master_addr") {
    o.master_addr = take();
    o.addr_given = true;
  } else if (name == "--master_port") {
    o.master_port = parse_number(name, take());
    o.port_given = true;
  } else if (name == "--grace_period") {
    o.grace_seconds = parse_seconds("--grace_period", take());
  } else if (name == "--max_restarts") {
    o.max_restarts = parse_number(name, take());
  } else if (name == "--rdzv_id") {
    o.run_id = take();
    const bool spaced = std::any_of(o.run_id.begin(), o.run_id.end(), [](unsigned char c) { return std::isspace(c); });
    if (o.run_id.empty() || o.run_id == "none" || spaced)
      throw UsageError{"kindling-run: --rdzv_id needs a non-empty identity without spaces, other than 'none', got '" +
                       o.run_id + "'"};
  } else if (name == "--rdzv_endpoint") {
    endpoint = take();
    if (endpoint.empty()) throw UsageError{"kindling-run: --rdzv_endpoint needs a host, got ''"};
  } else if (name == "--rdzv_backend") {
    backend = take();
    if (backend == "etcd-v2") {
      throw UsageError{
          "kindling-run: --rdzv_backend etcd-v2 is torchrun's rendezvous on etcd's v2 API (removed from etcd "
          "3.6); kindling-run speaks etcd's v3 API: give --rdzv_backend etcd (every node of the job runs "
          "kindling-run)"};
    }
    if (backend != "c10d" && backend != "static" && backend != "etcd")
      throw UsageError{"kindling-run: --rdzv_backend is c10d (elastic), etcd (elastic) or static, got '" + backend +
                       "'"};
  } else if (name == "--rdzv_conf") {
    add_rdzv_conf(o, take());
  } else if (name == "--standalone") {
    flag_only();
    o.standalone = true;
  } else if (name == "--live_recovery") {
    flag_only();
    o.live_recovery = true;
  } else if (name == "--warm_join") {
    flag_only();
    o.warm_join = true;
  } else if (name == "--no_prefix") {
    flag_only();
    o.prefix = false;
  } else if (name == "--no_python") {
    flag_only();
  } else {
    throw UsageError{"kindling-run: unknown option '" + arg + "'"};
  }
}

// The elastic options together. Throws UsageError.
void check_elastic(const Options& o) {
  if (o.min_nodes < 1) throw UsageError{"kindling-run: --nnodes MIN:MAX needs MIN >= 1"};
  if (o.min_nodes > o.max_nodes) {
    throw UsageError{"kindling-run: --nnodes " + std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes) +
                     " has MIN greater than MAX; write the smallest world first (e.g. " + std::to_string(o.max_nodes) +
                     ":" + std::to_string(o.min_nodes) + ")"};
  }
  if (o.rdzv_host.empty()) {
    throw UsageError{"kindling-run: elastic --nnodes " + std::to_string(o.min_nodes) + ":" +
                     std::to_string(o.max_nodes) +
                     " needs --rdzv_endpoint HOST[:PORT], an address of one of the nodes that every node can reach"};
  }
  if (o.max_nodes > 1 && o.run_id.empty()) {
    throw UsageError{
        "kindling-run: elastic mode on several nodes needs --rdzv_id ID, the same on every node (it "
        "names the job in the rendezvous and across restarts)"};
  }
  if (o.node_rank_given || o.addr_given || o.port_given || o.standalone) {
    throw UsageError{
        "kindling-run: in elastic mode the rendezvous assigns node ranks and the workers' master; drop "
        "--node_rank, --master_addr, --master_port and --standalone (or use --rdzv_backend static)"};
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
  if (o.warm_join && !o.live_recovery) {
    throw UsageError{"kindling-run: --warm_join needs --live_recovery (the running nodes keep training while this "
                     "node's workers start, and take it in without a restart)"};
  }
  if (o.elastic) return check_elastic(o);
  if (o.live_recovery) {
    throw UsageError{
        "kindling-run: --live_recovery needs the elastic rendezvous (--nnodes MIN:MAX or --rdzv_endpoint), "
        "which forms the new world when a node is lost or arrives"};
  }
  const int nnodes = o.max_nodes;
  if (nnodes < 1) throw UsageError{"kindling-run: --nnodes must be at least 1"};
  if (o.node_rank >= nnodes) {
    throw UsageError{"kindling-run: --node_rank " + std::to_string(o.node_rank) + " is out of range for --nnodes " +
                     std::to_string(nnodes) + " (use 0.." + std::to_string(nnodes - 1) + ")"};
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    throw UsageError{"kindling-run: --master_port must be between 1 and 65535, got " + std::to_string(o.master_port)};
  }
  if (o.standalone) {
    if (nnodes != 1)
      throw UsageError{"kindling-run: --standalone runs one node; it cannot be combined with --nnodes " +
                       std::to_string(nnodes)};
    if (o.addr_given || o.port_given) {
      throw UsageError{
          "kindling-run: --standalone picks the rendezvous address itself; drop --master_addr/--master_port"};
    }
  }
  if (nnodes > 1 && !o.addr_given) {
    throw UsageError{"kindling-run: --nnodes " + std::to_string(nnodes) +
                     " needs --master_addr, the address of node 0 that every node can reach (the default "
                     "127.0.0.1 only works on one node), or --rdzv_endpoint for the elastic rendezvous"};
  }
  // Each node's agent would restart its own workers alone: the other nodes' ranks stay in the
  // failed attempt and the restarted ones wait for them until the timeout (seen on the cluster
  // fixture). The elastic rendezvous restarts every node together.
  if (nnodes > 1 && o.max_restarts > 0) {
    throw UsageError{"kindling-run: --max_restarts " + std::to_string(o.max_restarts) + " with --nnodes " +
                     std::to_string(nnodes) +
                     " and --master_addr (the static rendezvous) would restart each node's workers on their own, "
                     "while the other nodes' ranks stay in the failed attempt; give every node --rdzv_endpoint "
                     "HOST[:PORT] --rdzv_id ID instead (the rendezvous restarts every node together), or "
                     "--max_restarts 0"};
  }
}

}  // namespace

std::string usage_error_text(const UsageError& error) {
  const std::string usage(kUsage);
  return usage.substr(0, usage.find('\n')) + "  (kindling-run --help lists the options)\n" + error.what() + "\n";
}

// torchrun's spellings: "--name value" or "--name=value", dashes or underscores inside the
// name; the program and its arguments follow the options (or "--").
Options parse(int argc, char** argv) {
  Options o;
  std::string backend, endpoint;
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
    set_option(o, arg, name, take, flag_only, backend, endpoint);
  }
  for (; i < argc; ++i) o.program.push_back(argv[i]);
  if (!endpoint.empty()) set_endpoint(o, endpoint, backend == "etcd");
  if (backend == "static") {
    if (o.min_nodes != o.max_nodes)
      throw UsageError{"kindling-run: --rdzv_backend static needs a fixed --nnodes N, not a range MIN:MAX"};
    o.elastic = false;
  } else if (!o.rdzv_host.empty()) {
    o.elastic = true;
  }
  check(o);
  return o;
}

}  // namespace kindling_run
