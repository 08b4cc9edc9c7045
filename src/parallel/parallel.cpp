// kindling::dist::Parallel: launcher mode (initialize + run + finalize) and spawn mode
// (start nproc_per_node children by re-executing this program or by fork).
#include "kindling/dist/parallel.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

#include "common/env.h"
#include "common/strings.h"
#include "dist/backends/registry.h"
#include "dist/init_options.h"
#include "launch/worker_errors.h"
#include "kindling/dist/dist.h"
#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "parallel/spawn.h"
#include "supervisor/agent/elastic_agent.h"
#include "supervisor/rendezvous/rendezvous_conf.h"

namespace kindling {
namespace dist {

namespace {

using ::kindling::detail::get_env;

// Parallel objects constructed so far in this process. A re-executed child is told which
// one started it (KINDLING_PARALLEL_CHILD) and leaves the others inert.
std::atomic<int> g_parallel_count{0};

int self_index_from_env() {
  auto v = get_env("KINDLING_PARALLEL_CHILD");
  if (!v) return -1;
  return ::kindling::detail::parse_int(*v, "environment variable KINDLING_PARALLEL_CHILD");
}

const std::string kWhere = "kindling::dist::Parallel: ";

std::string text_of(const std::optional<int>& v) { return v ? std::to_string(*v) : std::string(); }
std::string text_of(const std::optional<std::string>& v) { return v.value_or(""); }

// The elastic spawn mode's options (rdzv_endpoint given).
void check_elastic_options(const ParallelOptions& o) {
  const int nnodes = o.nnodes().value_or(1);
  const int fewest = o.min_nnodes().value_or(nnodes);
  KINDLING_CHECK(fewest >= 1 && fewest <= nnodes, kWhere, "min_nnodes must be between 1 and nnodes=", nnodes,
                 " (the most nodes), got ", fewest);
  KINDLING_CHECK(!o.node_rank() && !o.master_addr() && !o.master_port() && !o.init_method(), kWhere,
                 "with rdzv_endpoint the rendezvous assigns node ranks and where the ranks meet; drop node_rank, "
                 "master_addr, master_port and init_method");
  KINDLING_CHECK(nnodes == 1 || o.rdzv_id(), kWhere, "rdzv_endpoint with nnodes=", nnodes,
                 " needs rdzv_id, the job's identity, the same on every node");
  KINDLING_CHECK(o.nproc_per_node(), kWhere,
                 "rdzv_endpoint starts this node's processes itself: give nproc_per_node too");
  KINDLING_CHECK(o.last_call_timeout().count() >= 0, kWhere, "last_call_timeout must not be negative");
  KINDLING_CHECK(o.rdzv_backend() == "c10d" || o.rdzv_backend() == "etcd", kWhere,
                 "rdzv_backend is 'c10d' (a node serves the rounds) or 'etcd' (an etcd cluster keeps them), got '",
                 o.rdzv_backend(), "'");
  supervisor::ElasticAgentOptions scratch;
  const std::string conf_problem = supervisor::apply_rdzv_conf(o.rdzv_conf(), scratch);
  KINDLING_CHECK(conf_problem.empty(), kWhere, "rdzv_conf: ", conf_problem);
  if (o.rdzv_backend() == "etcd") {
    std::vector<std::string> members;
    const std::string problem = supervisor::parse_etcd_members(*o.rdzv_endpoint(), members);
    KINDLING_CHECK(problem.empty(), kWhere, "rdzv_endpoint (etcd members) ", problem);
  }
}

// Checks the options on their own (not against a launcher) and returns the backend's traits.
const detail::BackendTraits& check_parallel_options(const ParallelOptions& o) {
  // Named arguments, not temporaries: the result is the registry's entry, which GCC 13's
  // -Wdangling-reference cannot tell.
  const std::string backend = o.backend().value_or("serial"), who = "kindling::dist::Parallel";
  const auto& traits = detail::usable_backend(backend, who);
  auto forbid_serial = [&](const char* name, const std::string& value, bool given) {
    KINDLING_CHECK(traits.joins_ranks || !given, kWhere, "backend is ", o.backend() ? "'serial'" : "not given",
                   ", so argument '", name, "' should not be given either (got ", value,
                   "); choose a backend such as 'gloo' to run several processes");
  };
  forbid_serial("nproc_per_node", text_of(o.nproc_per_node()), o.nproc_per_node().has_value());
  forbid_serial("nnodes", text_of(o.nnodes()), o.nnodes().has_value());
  forbid_serial("node_rank", text_of(o.node_rank()), o.node_rank().has_value());
  forbid_serial("master_addr", text_of(o.master_addr()), o.master_addr().has_value());
  forbid_serial("master_port", text_of(o.master_port()), o.master_port().has_value());
  forbid_serial("init_method", text_of(o.init_method()), o.init_method().has_value());
  forbid_serial("rdzv_endpoint", text_of(o.rdzv_endpoint()), o.rdzv_endpoint().has_value());
  KINDLING_CHECK(o.rdzv_endpoint() || (!o.live_recovery() && o.rdzv_backend() == "c10d"), kWhere,
                 o.live_recovery() ? "live_recovery" : "rdzv_backend '" + o.rdzv_backend() + "'",
                 " needs rdzv_endpoint (the elastic rendezvous between the nodes, which forms the new world when a "
                 "node is lost or arrives)");

  KINDLING_CHECK(!o.nproc_per_node() || *o.nproc_per_node() >= 1, kWhere, "nproc_per_node must be positive, got ",
                 *o.nproc_per_node());
  KINDLING_CHECK(!o.nnodes() || *o.nnodes() >= 1, kWhere, "nnodes must be positive, got ", *o.nnodes());
  const int nnodes = o.nnodes().value_or(1);
  if (o.rdzv_endpoint()) {
    check_elastic_options(o);
  } else {
    KINDLING_CHECK(!o.min_nnodes(), kWhere, "min_nnodes=", *o.min_nnodes(),
                   " needs rdzv_endpoint (the elastic rendezvous between the nodes)");
    KINDLING_CHECK(o.rdzv_conf().empty(), kWhere, "rdzv_conf='", o.rdzv_conf(),
                   "' needs rdzv_endpoint (it tunes the elastic rendezvous between the nodes)");
  }
  KINDLING_CHECK(nnodes == 1 || o.node_rank() || o.rdzv_endpoint(), kWhere, "nnodes is ", nnodes,
                 ", so node_rank must be given too (the index of this node, 0..", nnodes - 1, ")");
  KINDLING_CHECK(!o.node_rank() || (*o.node_rank() >= 0 && *o.node_rank() < nnodes), kWhere,
                 "node_rank must be between 0 and ", nnodes - 1, " for nnodes=", nnodes, ", got ", *o.node_rank());
  KINDLING_CHECK(!o.master_port() || (*o.master_port() > 0 && *o.master_port() < 65536), kWhere,
                 "master_port must be a TCP port between 1 and 65535, got ", *o.master_port());
  KINDLING_CHECK(o.grace_period().count() >= 0, kWhere, "grace_period must not be negative");
  KINDLING_CHECK(o.max_restarts() >= 0, kWhere, "max_restarts must not be negative, got ", o.max_restarts());
  // Without the rendezvous each node would restart its own children alone (kindling-run's rule).
  KINDLING_CHECK(nnodes == 1 || o.max_restarts() == 0 || o.rdzv_endpoint(), kWhere, "max_restarts=",
                 o.max_restarts(), " with nnodes=", nnodes,
                 " and master_addr (a static rendezvous) would restart each node's children on their own, while the "
                 "other nodes' ranks stay in the failed attempt; give every node rdzv_endpoint(\"host[:port]\") and "
                 "rdzv_id(...) instead (the rendezvous restarts every node together), or max_restarts(0)");
  KINDLING_CHECK(!o.init_method() || (!o.master_addr() && !o.master_port()), kWhere, "init_method '", *o.init_method(),
                 "' and master_addr/master_port both say where ranks meet; give one or the other");
  detail::check_init_options(traits, parallel_init_options(o), "kindling::dist::Parallel");
  return traits;
}

// Started by a launcher (or by our own parent): the layout asked for must agree with it.
void check_agrees_with_launcher(const ParallelOptions& o, const LaunchEnvironment& launch) {
  const std::string who = launch.launcher == "parallel" ? "a Parallel parent" : launch.launcher;
  const int nnodes = o.nnodes().value_or(1);
  // A launcher of several processes per node says how many (LOCAL_WORLD_SIZE); RANK and
  // WORLD_SIZE alone beside nproc_per_node are most likely left in a shell.
  KINDLING_CHECK(launch.launcher != "env" || !o.nproc_per_node() || launch.local_world_size, kWhere,
                 "nproc_per_node=", text_of(o.nproc_per_node()),
                 " asks this program to start its processes, but RANK=", launch.rank,
                 " and WORLD_SIZE=", launch.world_size,
                 " are set in the environment without LOCAL_WORLD_SIZE or any launcher's other variables (left over "
                 "in this shell?), which say that someone else started this process as rank ",
                 launch.rank, " of ", launch.world_size,
                 ". Unset RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT to start the processes here, or "
                 "drop nproc_per_node when a launcher starts them");
  if (o.nproc_per_node() && launch.local_world_size) {
    KINDLING_CHECK(*launch.local_world_size == *o.nproc_per_node(), kWhere, "started by ", who, " with ",
                   *launch.local_world_size, " processes on this node, but nproc_per_node=", *o.nproc_per_node(),
                   "; drop nproc_per_node when using a launcher, or make them agree");
  }
  if (o.nproc_per_node() && o.rdzv_endpoint()) {
    // An elastic round: any number of nodes between min_nnodes and nnodes.
    const int nproc = *o.nproc_per_node(), fewest = o.min_nnodes().value_or(nnodes);
    KINDLING_CHECK(
        launch.world_size % nproc == 0 && launch.world_size >= fewest * nproc && launch.world_size <= nnodes * nproc,
        kWhere, "started by ", who, " with world size ", launch.world_size, ", but min_nnodes=", fewest,
        " to nnodes=", nnodes, " nodes of nproc_per_node=", nproc, " processes allow ", fewest * nproc, " to ",
        nnodes * nproc, " in steps of ", nproc);
  } else if (o.nproc_per_node()) {
    KINDLING_CHECK(launch.world_size == nnodes * *o.nproc_per_node(), kWhere, "started by ", who, " with world size ",
                   launch.world_size, ", but nnodes=", nnodes, " x nproc_per_node=", *o.nproc_per_node(), " = ",
                   nnodes * *o.nproc_per_node(), "; drop these options when using a launcher, or make them agree");
  }
  if (o.node_rank() && launch.node_rank) {
    KINDLING_CHECK(*launch.node_rank == *o.node_rank(), kWhere, "started by ", who, " as node ", *launch.node_rank,
                   ", but node_rank=", *o.node_rank());
  }
  if (o.master_addr() && launch.master_addr) {
    KINDLING_CHECK(*launch.master_addr == *o.master_addr(), kWhere, "started by ", who,
                   " with MASTER_ADDR=", *launch.master_addr, ", but master_addr=", *o.master_addr());
  }
  if (o.master_port() && launch.master_port) {
    KINDLING_CHECK(*launch.master_port == *o.master_port(), kWhere, "started by ", who,
                   " with MASTER_PORT=", *launch.master_port, ", but master_port=", *o.master_port());
  }
}

// No launcher and nproc_per_node given: this program starts the processes itself.
void check_can_spawn(const detail::BackendTraits& traits, const ParallelOptions& o) {
  const int nnodes = o.nnodes().value_or(1);
  const int processes = nnodes * *o.nproc_per_node();
  KINDLING_CHECK(traits.own_launcher.empty(), kWhere, "the ", traits.name,
                 " backend cannot start its own processes: its ranks are started and connected by ",
                 traits.own_launcher, ". Run ", traits.launch_command ? traits.launch_command(processes) : "it",
                 "; under it this Parallel only initializes");
  KINDLING_CHECK(nnodes == 1 || o.rdzv_endpoint() || o.init_method() || (o.master_addr() && o.master_port()), kWhere,
                 "nnodes is ", nnodes,
                 ", so master_addr and master_port (the address of node 0, the same on every node) or init_method "
                 "must be given");
}

}  // namespace

Parallel::Parallel(ParallelOptions options) : options_(std::move(options)), index_(g_parallel_count++) {
  detail::record_uncaught_errors();  // a misuse refused below ends the program cleanly if uncaught
  const ParallelOptions& o = options_;
  const detail::BackendTraits& traits = check_parallel_options(o);
  const int child_of = self_index_from_env();
  if (!traits.joins_ranks) {
    // One process: refused when a launcher started several (initialize says why).
    if (child_of < 0 || child_of == index_) initialize("serial");
    return;
  }
  if (child_of >= 0 && child_of != index_) {
    inert_ = true;  // a re-executed child passing a Parallel its parent did not spawn from
    return;
  }
  const LaunchEnvironment launch = detect_launch_environment();
  if (launch.detected()) {
    check_agrees_with_launcher(o, launch);
  } else if (o.nproc_per_node()) {
    check_can_spawn(traits, o);
    spawn_mode_ = true;
    return;
  } else {
    KINDLING_CHECK(
        !o.nnodes() && !o.node_rank() && !o.master_addr() && !o.master_port() && !o.rdzv_endpoint(), kWhere,
        "nnodes / node_rank / master_addr / master_port / rdzv_endpoint only apply when this program starts the "
        "processes: "
        "give nproc_per_node too, or start the program with a launcher (kindling-run, torchrun, mpirun, srun)");
  }
  if (o.master_addr() && !get_env("MASTER_ADDR")) ::kindling::detail::set_env("MASTER_ADDR", *o.master_addr());
  if (o.master_port() && !get_env("MASTER_PORT"))
    ::kindling::detail::set_env("MASTER_PORT", std::to_string(*o.master_port()));
  initialize(*o.backend(), parallel_init_options(o));
  initialized_here_ = true;
  if (get_rank() == 0) {
    log(LogLevel::kInfo, kWhere + "initialized process group with backend '" + *o.backend() + "' (" +
                             std::to_string(get_world_size()) + " processes, launcher: " + launch.launcher + ")");
  }
}

Parallel::~Parallel() {
  if (initialized_here_) {
    try {
      finalize();
    } catch (const std::exception& e) {
      log(LogLevel::kError, std::string("kindling::dist::Parallel: finalize failed: ") + e.what());
    }
  }
}

std::string Parallel::mode() const {
  if (spawn_mode_) return "spawn";
  if (initialized_here_) return "launcher";
  return inert_ ? "inert" : "serial";
}

namespace {

// Launcher mode: fn runs here. A re-executed child then ends the process (its parent goes on
// after run()); `finalize_child` finalizes before that.
void run_here(const std::function<void(int)>& fn, bool child, const std::function<void()>& finalize_child) {
  if (!child) {
    try {
      fn(get_local_rank());
    } catch (const std::exception& e) {
      record_error(e);  // for the launcher's report (TORCHELASTIC_ERROR_FILE)
      throw;
    }
    return;
  }
  int rc = 0;
  try {
    fn(get_local_rank());
  } catch (const std::exception& e) {
    record_error(e);
    log(LogLevel::kError, std::string("kindling::dist::Parallel: the function failed: ") + e.what());
    rc = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  if (rc != 0) ::_exit(rc);
  finalize_child();
  std::fflush(stdout);
  std::exit(0);
}

}  // namespace

void Parallel::run_impl(const std::function<void(int)>& fn) {
  if (inert_) return;
  if (spawn_mode_) return spawn_ranks(options_, index_, fn);
  run_here(fn, self_index_from_env() >= 0, [this] {
    finalize();
    initialized_here_ = false;
  });
}

}  // namespace dist
}  // namespace kindling
