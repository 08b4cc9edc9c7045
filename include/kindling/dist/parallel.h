#pragma once
/// \file
/// kindling::dist::Parallel and spawn(): run a training function on every process of a
/// distributed job, whether this program starts the processes itself or was started by a
/// launcher (kindling-run, torchrun, mpirun, srun, horovodrun). The C++ counterpart of
/// idist.Parallel / idist.spawn.
///
/// \code
///   void training(int local_rank, const Config& config) { ... }
///
///   int main(int argc, char** argv) {
///     Config config = parse(argc, argv);
///     kindling::dist::Parallel parallel(kindling::dist::ParallelOptions("gloo").nproc_per_node(2));
///     parallel.run(training, config);
///   }
/// \endcode
///
/// Two modes, chosen by the constructor:
///  - Launcher mode: nproc_per_node is not given, or the process was started by a
///    launcher (or by a Parallel parent). The constructor calls initialize(backend), run()
///    calls `fn(get_local_rank(), args...)` and the destructor calls finalize().
///  - Spawn mode: nproc_per_node is given and no launcher is detected. run() starts
///    nproc_per_node processes on this node and waits for them. With the default start
///    method (StartMethod::kExec) each child re-executes this program (/proc/self/exe, same
///    arguments), so everything in main() before run() also runs in each child; when the
///    child reaches the same run() call it executes `fn` there and then exits (a child never
///    returns from run()). StartMethod::kFork forks instead: no re-execution, but only safe
///    when the parent has not started LibTorch's worker threads (OpenMP and fork do not
///    mix). If a child fails, run() stops the others within seconds and throws
///    kindling::LaunchError naming each failed rank, its exit status and its last stderr
///    lines (also when a child cannot be started).
///
/// With nproc_per_node given under a launcher, the launcher's layout must agree
/// (LOCAL_WORLD_SIZE == nproc_per_node and WORLD_SIZE == nnodes * nproc_per_node), so the
/// same program runs directly and under `kindling-run --nproc_per_node N`.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace dist {

/// How spawn mode starts its children.
enum class StartMethod {
  kExec,  ///< re-execute this program (default; safe with LibTorch's thread pools)
  kFork,  ///< fork(); the child calls fn directly
};

/// Options of Parallel and spawn(). Chain the setters:
/// `ParallelOptions("gloo").nproc_per_node(4).timeout(std::chrono::minutes(5))`.
class KINDLING_API ParallelOptions {
 public:
  ParallelOptions() = default;
  /// `backend`: "serial", "gloo", "nccl" or "mpi". No backend (or "serial") runs fn once.
  explicit ParallelOptions(std::string backend) : backend_(std::move(backend)) {}

  /// "serial", "gloo", "nccl" or "mpi"; unset runs fn once, as "serial".
  KINDLING_ARG(std::optional<std::string>, backend);

  /// Processes to start on this node (spawn mode).
  KINDLING_ARG(std::optional<int>, nproc_per_node);

  /// Number of nodes of the job (default 1). With more than one, node_rank and
  /// master_addr/master_port (or init_method) are required.
  KINDLING_ARG(std::optional<int>, nnodes);

  /// Index of this node, in [0, nnodes).
  KINDLING_ARG(std::optional<int>, node_rank);

  /// Address of the node of rank 0 (default 127.0.0.1).
  KINDLING_ARG(std::optional<std::string>, master_addr);

  /// Port on which rank 0 hosts the rendezvous (default 15000, as idist).
  KINDLING_ARG(std::optional<int>, master_port);

  /// "env://" (default), "tcp://host:port" or "file:///path".
  KINDLING_ARG(std::optional<std::string>, init_method);

  /// Rendezvous and collective timeout (default 30 minutes).
  KINDLING_ARG(std::optional<std::chrono::milliseconds>, timeout);

  /// Stall period of the ranks (InitOptions::stall_timeout); default: KINDLING_STALL_TIMEOUT,
  /// else 60 s.
  KINDLING_ARG(std::optional<std::chrono::milliseconds>, stall_timeout);

  /// Spawn mode: when a child fails, stop all of them and start them all again, at most
  /// this many times (torchrun's --max_restarts); the children see the attempt number in
  /// TORCHELASTIC_RESTART_COUNT (kindling::dist::restart_count()). Default 0.
  KINDLING_ARG(int, max_restarts) = 0;

  /// Elastic spawn mode (what `kindling-run --nnodes MIN:MAX` does, in this program):
  /// "host[:port]" (port 29400 when not given) of the rendezvous between the nodes'
  /// programs, the same on every node; the node that owns the address serves it and must
  /// stay up. nnodes is then the most nodes, min_nnodes the fewest, and node ranks and the
  /// world are made anew in each rendezvous round: when a child fails on any node, every
  /// node starts its children again (max_restarts) with the nodes that are back within
  /// last_call_timeout; a node that starts later joins at a new round. See
  /// docs/fault-tolerance.md. node_rank, master_addr, master_port and init_method do not apply.
  KINDLING_ARG(std::optional<std::string>, rdzv_endpoint);
  /// Elastic: the fewest nodes the job runs with (default nnodes).
  KINDLING_ARG(std::optional<int>, min_nnodes);
  /// Elastic: the job's identity, the same on every node (required with nnodes > 1).
  KINDLING_ARG(std::optional<std::string>, rdzv_id);
  /// Elastic: how long a round of min_nnodes or more waits for more nodes (default 30 s).
  KINDLING_ARG(std::chrono::milliseconds, last_call_timeout) = std::chrono::seconds(30);
  /// Elastic: where the rounds are kept (kindling-run's --rdzv_backend): "c10d" (the default:
  /// the node that owns rdzv_endpoint serves them and must stay up) or "etcd" (rdzv_endpoint
  /// lists the members of an etcd cluster, "h1[:2379],h2,...": the nodes elect the one that
  /// serves the rounds there, and another takes over when it is lost; no node must stay up).
  KINDLING_ARG(std::string, rdzv_backend) = "c10d";
  /// Elastic: when a node is lost or arrives, keep the children running; they make the next
  /// world in the same processes (kindling-run's --live_recovery; the function uses
  /// kindling::handlers::LiveRecovery, kindling/handlers/checkpointing/live_recovery.h). A
  /// round then closes as soon as the lost nodes are known gone. Default false: every child
  /// is stopped and started again.
  KINDLING_ARG(bool, live_recovery) = false;
  /// Elastic: kindling-run's --rdzv_conf, "K=V,K=V": join_timeout=S and last_call_timeout=S
  /// (win over timeout and last_call_timeout), keep_alive_interval=S (default 1: how often a
  /// node's agent asks the rendezvous while its children run), keep_alive_max_attempt=N
  /// (default 3: an agent silent for N intervals is gone), takeover_wait=S (default 5: how long
  /// an agent that took over serving the rounds waits for the running round's nodes) and lease=N
  /// (default 5, etcd: whole seconds an unreachable serving agent keeps its place). Refused with
  /// the setting named when malformed (kindling::UsageError).
  KINDLING_ARG(std::string, rdzv_conf);

  /// Spawn mode: how children start (default kExec; see StartMethod).
  KINDLING_ARG(StartMethod, start_method) = StartMethod::kExec;

  /// Time between SIGTERM and SIGKILL when the other children are stopped after a
  /// failure (default 3000 ms).
  KINDLING_ARG(std::chrono::milliseconds, grace_period) = std::chrono::seconds(3);
};

/// Scope object: see the file comment. Throws kindling::UsageError from the constructor
/// for every invalid or contradictory combination of options.
class KINDLING_API Parallel {
 public:
  explicit Parallel(ParallelOptions options = ParallelOptions());
  ~Parallel();
  Parallel(const Parallel&) = delete;
  Parallel& operator=(const Parallel&) = delete;

  /// Calls `fn(local_rank, args...)` on every process (see the file comment). Every process
  /// of the job reaches it. Throws kindling::LaunchError in the spawning parent when a child
  /// fails; what `fn` throws in a child ends that child with exit status 1.
  template <class Fn, class... Args>
  void run(Fn&& fn, Args&&... args) {
    run_impl([&](int local_rank) { std::invoke(fn, local_rank, args...); });
  }

  /// True when this Parallel starts processes itself (spawn mode).
  bool spawns() const { return spawn_mode_; }
  /// "serial", "launcher", "spawn", or "inert" (in a re-executed child, a Parallel other
  /// than the one its parent spawned from: it does nothing).
  std::string mode() const;
  const ParallelOptions& options() const { return options_; }

 private:
  void run_impl(const std::function<void(int)>& fn);
  ParallelOptions options_;
  bool spawn_mode_ = false;
  bool initialized_here_ = false;
  bool inert_ = false;
  int index_ = 0;  // which Parallel of this process it is (matched by re-executed children)
};

/// idist.spawn: `Parallel(options).run(fn, args...)`; options must give nproc_per_node.
template <class Fn, class... Args>
void spawn(const ParallelOptions& options, Fn&& fn, Args&&... args) {
  Parallel parallel(options);
  parallel.run(std::forward<Fn>(fn), std::forward<Args>(args)...);
}

/// spawn(ParallelOptions(backend).nproc_per_node(nproc_per_node), fn, args...).
template <class Fn, class... Args>
void spawn(const std::string& backend, int nproc_per_node, Fn&& fn, Args&&... args) {
  spawn(ParallelOptions(backend).nproc_per_node(nproc_per_node), std::forward<Fn>(fn), std::forward<Args>(args)...);
}

}  // namespace dist
}  // namespace kindling
