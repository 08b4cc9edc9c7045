// Lifecycle and queries of kindling::dist: initialize / finalize / sync, the environment
// rules, node layout, groups.
#include "dist/runtime.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "common/env.h"
#include "common/host.h"
#include "common/identity.h"
#include "common/strings.h"
#include "dist/agreement.h"
#include "dist/backends/registry.h"
#include "dist/diagnostics/flight_dump.h"
#include "dist/init_options.h"
#include "dist/layout.h"
#include "dist/live_round.h"
#include "kindling/config.h"
#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "launch/worker_errors.h"

namespace kindling {
namespace dist {
namespace detail {

void maybe_sync() {
  auto& rt = runtime();
  if (rt.need_sync.load(std::memory_order_relaxed) && rt.world == nullptr) sync();
}

std::shared_ptr<GroupState> resolve(const Group& group, const char* caller) {
  maybe_sync();
  auto& rt = runtime();
  if (rt.world == nullptr) warn_if_never_initialized(caller);
  if (group.state() == nullptr) return rt.world;
  KINDLING_CHECK(group.state()->valid.load(), "kindling::dist::", caller,
                 ": the group was created before finalize() and is no longer valid; create it again with "
                 "new_group() after initialize()");
  return group.state();
}

std::chrono::milliseconds default_stall_period() { return stall_period_from_env(std::chrono::seconds(60)); }

void install_model(std::unique_ptr<Backend> backend, int rank, int world_size, std::chrono::milliseconds timeout,
                   std::chrono::milliseconds stall_period, std::optional<int> env_local_rank) {
  const BackendTraits* traits = find_backend(backend->name());
  flight_start_world(rank, world_size, backend->name(), traits);
  auto& rt = runtime();
  auto world = std::make_shared<GroupState>();
  world->id = 0;
  world->ranks.resize(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) world->ranks[static_cast<std::size_t>(r)] = r;
  world->group_rank = rank;
  world->comm = backend->world();
  world->timeout = timeout;
  rt.backend_name = backend->name();
  note_model_installed();
  rt.traits = traits;
  rt.rank = rank;
  rt.world_size = world_size;
  rt.world = world;
  ::kindling::detail::set_identity(rank, world_size);
  rt.groups = {world};
  rt.next_group_index = 1;
  if (auto target = backend->monitor_target(); target.store && world_size > 1) {
    rt.monitor = std::make_unique<StallMonitor>(std::move(target), rank, stall_period);
    rt.monitor->track(world);
  }
  rt.backend = std::move(backend);
  rt.need_sync = false;
  try {
    compute_layout(rt, env_local_rank);
    check_settings_agree(rt);
  } catch (...) {
    finalize();
    throw;
  }
}

}  // namespace detail

using detail::runtime;
using ::kindling::detail::get_env;
using ::kindling::detail::get_env_int;
using ::kindling::detail::set_env;

namespace {

// A launcher that started several ranks expects each to join them: one rank that runs alone
// would finish by itself while the others wait for it until their timeout.
void refuse_serial_in_launched_world() {
  LaunchEnvironment launch;
  try {
    launch = detect_launch_environment();
  } catch (const kindling::Error&) {
    return;  // an incomplete launcher environment does not concern a process that runs alone
  }
  KINDLING_CHECK(launch.world_size <= 1, "kindling::dist::initialize(\"serial\"): the ", launch.launcher,
                 " environment says this process is rank ", launch.rank, " of ", launch.world_size,
                 ", but the serial backend runs it alone: it would finish by itself while the other ranks wait for it. "
                 "Choose a backend that joins the ranks (gloo, mpi, nccl), or start a single process without the "
                 "launcher (unset RANK and WORLD_SIZE if they are left over in this shell)");
}

}  // namespace

std::vector<std::string> available_backends() { return detail::built_backends(); }

namespace {

// Gloo and c10d's store write to their sockets without MSG_NOSIGNAL: when a peer's host
// goes away, the next write would end this process by SIGPIPE, with no message at all.
// Python ignores SIGPIPE from its start; do the same, unless the program installed a
// handler of its own, so that the write fails (EPIPE) and the error names the lost peer.
void ignore_broken_pipes() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

// The launchers' variables that are set, as "NAME=value, ...", before initialize sets any.
std::string launch_variables() {
  static const char* const kNames[] = {"RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "GROUP_RANK",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                                       "PMIX_RANK",
                                       "SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "HOROVOD_RANK",
                                       "HOROVOD_SIZE"};
  std::string set;
  for (const char* name : kNames) {
    if (auto v = get_env(name)) set += (set.empty() ? "" : ", ") + std::string(name) + "=" + *v;
  }
  return set.empty() ? "none set" : set;
}

// This rank's place in the world: the launcher's environment wins over InitOptions.
void resolve_ranks(const InitOptions& options, const LaunchEnvironment& launch, detail::WorldConfig& cfg) {
  const bool env_method = cfg.init_method.rfind("env://", 0) == 0;
  KINDLING_CHECK(launch.launcher != "slurm" || (!options.rank() && !options.world_size()),
                 "kindling::dist::initialize: InitOptions rank/world_size must not be given under Slurm (SLURM_JOB_ID=",
                 get_env("SLURM_JOB_ID").value_or(""), "): Slurm sets them through SLURM_PROCID and SLURM_NTASKS");
  KINDLING_CHECK(
      !env_method || launch.detected() || !launch.local_rank,
      "kindling::dist::initialize: incomplete distributed environment: LOCAL_RANK=", launch.local_rank.value_or(0),
      " is set but RANK and WORLD_SIZE are not. Set all three, or none of them");
  if (launch.detected()) {
    cfg.rank = launch.rank;
    cfg.world_size = launch.world_size;
    if ((options.rank() && *options.rank() != cfg.rank) ||
        (options.world_size() && *options.world_size() != cfg.world_size)) {
      log(LogLevel::kWarning, "kindling::dist::initialize: warning: InitOptions rank/world_size ignored; the " +
                                  launch.launcher + " environment says rank " + std::to_string(cfg.rank) + " of " +
                                  std::to_string(cfg.world_size));
    }
  } else {
    KINDLING_CHECK(options.rank().has_value() == options.world_size().has_value(),
                   "kindling::dist::initialize: InitOptions gives ", options.rank() ? "rank" : "world_size",
                   " without ", options.rank() ? "world_size" : "rank", "; give both or neither");
    cfg.rank = options.rank().value_or(0);
    cfg.world_size = options.world_size().value_or(1);
  }
  KINDLING_CHECK(cfg.world_size >= 1, "kindling::dist::initialize: world size must be at least 1, got ",
                 cfg.world_size);
  KINDLING_CHECK(cfg.rank >= 0 && cfg.rank < cfg.world_size, "kindling::dist::initialize: rank ", cfg.rank,
                 " is out of range for world size ", cfg.world_size, "; ranks are 0..", cfg.world_size - 1,
                 ". Check RANK and WORLD_SIZE");
  cfg.local_rank = launch.local_rank;
  KINDLING_CHECK(!cfg.local_rank || (*cfg.local_rank >= 0 && *cfg.local_rank <= cfg.rank),
                 "kindling::dist::initialize: LOCAL_RANK=", cfg.local_rank.value_or(0),
                 " must be between 0 and the rank (", cfg.rank, ")");
}

// Where the ranks meet, for backends that meet through a rendezvous.
void resolve_rendezvous(const detail::BackendTraits& traits, const LaunchEnvironment& launch,
                        detail::WorldConfig& cfg) {
  const std::string& method = cfg.init_method;
  const bool env_method = method.rfind("env://", 0) == 0;
  if (env_method && !launch.master_addr_missing.empty()) {
    // Several nodes and no rendezvous address: only a backend whose launcher connects the
    // ranks can do without one.
    KINDLING_CHECK(!traits.own_launcher.empty(), launch.master_addr_missing);
  } else if (env_method) {
    cfg.master_addr = launch.master_addr ? *launch.master_addr : get_env("MASTER_ADDR").value_or("127.0.0.1");
    auto port = launch.master_port ? launch.master_port : get_env_int("MASTER_PORT");
    cfg.master_port = port.value_or(15000);
  } else if (method.rfind("tcp://", 0) == 0) {
    std::tie(cfg.master_addr, cfg.master_port) = detail::parse_tcp(method);
  }
  if (!cfg.master_addr.empty()) {  // a TCP rendezvous
    KINDLING_CHECK(cfg.master_port > 0 && cfg.master_port < 65536, "kindling::dist::initialize: port ", cfg.master_port,
                   " is out of range; use a free TCP port between 1 and 65535");
  }
}

// Starts the engine and installs the distributed model; on failure the environment is
// restored and every exception leaves as a kindling::Error.
void start_engine(const detail::BackendTraits& traits, const detail::WorldConfig& cfg,
                  std::vector<std::string> snapshot) {
  try {
    detail::install_model(detail::make_backend(traits, cfg), cfg.rank, cfg.world_size, cfg.timeout, cfg.stall_period, cfg.local_rank);
  } catch (const kindling::Error&) {
    ::kindling::detail::restore_env(snapshot);
    throw;
  } catch (const std::exception& e) {
    ::kindling::detail::restore_env(snapshot);
    throw CommunicationError(::kindling::detail::rank_prefix() + "kindling::dist::initialize(\"" + traits.name +
                             "\"): the engine failed to start: " + detail::engine_message(e) +
                             ". Check that every rank uses the same MASTER_ADDR/MASTER_PORT and world size.");
  }
  auto& rt = runtime();
  rt.env_snapshot = std::move(snapshot);
  set_env("LOCAL_RANK", std::to_string(rt.local_rank));
  // As idist does for every backend: this rank's GPU becomes the current CUDA device.
  if (at::hasCUDA()) c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device());
}

void initialize_model(const std::string& backend, const InitOptions& options) {
  const char* caller = "kindling::dist::initialize";
  detail::record_uncaught_errors();  // a misuse refused below ends the program cleanly if uncaught
  // The registry's entry, which outlives the call (a named string for `caller`, not a temporary:
  // GCC 13's -Wdangling-reference cannot tell).
  const std::string who = caller;
  const detail::BackendTraits& traits = detail::usable_backend(backend, who);
  auto& rt = runtime();
  KINDLING_CHECK(rt.world == nullptr, caller, ": already initialized with backend '", rt.backend_name,
                 "'; call kindling::dist::finalize() before initializing again");
  detail::check_init_options(traits, options, caller);
  detail::validate_kindling_environment();
  if (!traits.joins_ranks) {
    refuse_serial_in_launched_world();
    return;
  }
  ignore_broken_pipes();
  auto snapshot = ::kindling::detail::snapshot_env();
  detail::WorldConfig cfg;
  cfg.init_method = options.init_method();
  cfg.timeout = options.timeout();
  cfg.stall_period = options.stall_timeout() ? *options.stall_timeout() : detail::default_stall_period();
  cfg.gloo_threads = options.gloo_threads();
  // Who started us (launch_env.h): Slurm, torchrun / kindling-run, horovodrun, mpirun, PMIx
  // or nobody. A launcher's values win over InitOptions::rank/world_size.
  const LaunchEnvironment launch = detect_launch_environment();
  for (const auto& w : launch.warnings) log(LogLevel::kWarning, "kindling::dist::initialize: warning: " + w);
  cfg.launcher = launch.launcher;
  cfg.launch_variables = launch_variables();
  resolve_ranks(options, launch, cfg);
  resolve_rendezvous(traits, launch, cfg);
  detail::publish_environment(cfg, launch);
  start_engine(traits, cfg, std::move(snapshot));
}

}  // namespace

void initialize(const std::string& backend, const InitOptions& options) {
  try {
    detail::wait_as_standby(options.timeout());  // kindling-run --warm_join: the first round's layout
    detail::taking_newer_rounds([&] { initialize_model(backend, options); }, options.timeout());
  } catch (const std::exception& e) {
    // Under a launcher, the rank that could not start is the job's first failure (a port
    // another job holds, a refused setting): its error file names it in the summary.
    record_error(e);
    throw;
  }
}

void finalize() {
  auto& rt = runtime();
  // A rank that did not fail says so before its connections close (stall_monitor.h).
  if (rt.monitor && !rt.broken.load()) rt.monitor->finish(std::chrono::seconds(1));
  rt.monitor.reset();
  // (The mpi backend's own shared-memory path gives up cleanly, and MPI must be finalized.)
  const bool broken = rt.broken.exchange(false) && (rt.traits == nullptr || rt.traits->abandon_engine_after_failure);
  for (auto& weak : rt.groups) {
    if (auto g = weak.lock()) {
      g->valid = false;
      // After a failure the engine's threads may wait on peers for the whole timeout and
      // its destructor would join them: leave it to the end of the process instead.
      if (broken && g->comm) new std::shared_ptr<detail::Communicator>(std::move(g->comm));
      g->comm.reset();
    }
  }
  if (broken) (void)rt.backend.release();
  rt.broken_reason.clear();
  rt.groups.clear();
  rt.world.reset();
  ::kindling::detail::clear_identity();
  rt.backend.reset();
  rt.external_pg.reset();
  rt.external_store.reset();
  rt.backend_name = "serial";
  rt.traits = nullptr;
  rt.rank = 0;
  rt.world_size = 1;
  rt.local_rank = 0;
  rt.nproc_per_node = 1;
  rt.nnodes = 1;
  rt.node_rank = 0;
  if (rt.env_snapshot) {
    ::kindling::detail::restore_env(*rt.env_snapshot);
    rt.env_snapshot.reset();
  }
  rt.need_sync = true;
}

void set_local_rank(int local_rank) {
  KINDLING_CHECK(local_rank >= 0, "kindling::dist::set_local_rank: local rank must be >= 0, got ", local_rank);
  runtime().local_rank_hint = local_rank;
}

namespace {
// The runtime for a public query of this rank's place: picks up an external context, and
// warns when a launcher started several ranks that never initialized.
const detail::Runtime& queried(const char* what) {
  detail::maybe_sync();
  const auto& rt = detail::runtime();
  if (rt.world == nullptr) detail::warn_if_never_initialized(what);
  return rt;
}
}  // namespace

bool is_initialized() {
  detail::maybe_sync();
  return runtime().world != nullptr;
}

std::string backend() {
  detail::maybe_sync();
  return runtime().backend_name;
}
std::string model_name() {
  detail::maybe_sync();
  return runtime().world ? "native-dist" : "serial";
}
int get_rank() { return queried("get_rank").rank; }
int get_local_rank() { return queried("get_local_rank").local_rank; }
int get_world_size() { return queried("get_world_size").world_size; }
int get_nproc_per_node() { return queried("get_nproc_per_node").nproc_per_node; }
int get_nnodes() { return queried("get_nnodes").nnodes; }
int get_node_rank() { return queried("get_node_rank").node_rank; }

std::string hostname() {
  return ::kindling::detail::host_name("localhost");
}

c10::Device device() {
  detail::maybe_sync();
  if (at::hasCUDA()) {
    // Ranks of one node take GPUs in local-rank order and share them round-robin when
    // there are more ranks than GPUs (gloo allows that; nccl refused it at initialize).
    const int gpus = std::max(1, static_cast<int>(at::detail::getCUDAHooks().getNumGPUs()));
    const int local = runtime().world ? runtime().local_rank : 0;
    return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(local % gpus));
  }
  return c10::Device(c10::DeviceType::CPU);
}

std::string show_config() {
  std::ostringstream out;
  out << "distributed configuration: " << model_name() << "\n"
      << "backend: " << backend() << "\n"
      << "device: " << c10::DeviceTypeName(device().type(), true) << "\n"
      << "hostname: " << hostname() << "\n"
      << "world size: " << get_world_size() << "\n"
      << "rank: " << get_rank() << "\n"
      << "local rank: " << get_local_rank() << "\n"
      << "num processes per_node: " << get_nproc_per_node() << "\n"
      << "num nodes: " << get_nnodes() << "\n"
      << "node rank: " << get_node_rank() << "\n";
  if (get_rank() == 0) {
    std::istringstream lines(out.str());
    for (std::string line; std::getline(lines, line);) log(LogLevel::kInfo, line);
  }
  return out.str();
}

Group world() { return Group(); }

Group new_group(std::vector<int> ranks) {
  auto& rt = runtime();
  detail::maybe_sync();
  KINDLING_CHECK(!ranks.empty(), "kindling::dist::new_group: the list of ranks is empty; give at least one rank");
  std::sort(ranks.begin(), ranks.end());
  KINDLING_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), "kindling::dist::new_group: rank ",
                 *std::adjacent_find(ranks.begin(), ranks.end()), " is listed twice; give each rank once");
  KINDLING_CHECK(ranks.front() >= 0 && ranks.back() < rt.world_size, "kindling::dist::new_group: ranks must be in [0, ",
                 rt.world_size, "), got ", ranks.front() < 0 ? ranks.front() : ranks.back());
  auto g = std::make_shared<detail::GroupState>();
  g->ranks = ranks;
  g->group_rank = g->index_of(rt.rank);
  if (rt.world == nullptr) return Group(g);  // serial: the group {0}, collectives return inputs
  g->id = rt.next_group_index++;
  g->timeout = rt.world->timeout;
  g->comm = rt.backend->create_group(g->id, ranks, g->group_rank);
  rt.groups.push_back(g);
  if (rt.monitor) rt.monitor->track(g);
  return Group(g);
}

bool Group::is_world() const { return state_ == nullptr || state_->id == 0; }
std::vector<int> Group::ranks() const {
  if (state_) return state_->ranks;
  auto world = detail::resolve(*this, "Group::ranks");
  if (world) return world->ranks;
  return {0};
}
int Group::size() const {
  if (state_) return static_cast<int>(state_->ranks.size());
  return get_world_size();
}
int Group::rank() const {
  if (state_) return state_->group_rank;
  return get_rank();
}

}  // namespace dist
}  // namespace kindling
