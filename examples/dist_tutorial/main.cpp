// dist_tutorial: the programs of PyTorch's "Writing Distributed Applications" tutorial,
// written with kindling::dist and LibTorch's C++ frontend: point-to-point messages, a
// collective on a group, a hand-made ring all-reduce (plus the chunked ring the tutorial
// leaves as an exercise) and synchronous SGD with gradient averaging on Fashion-MNIST.
//
//   ./dist_tutorial                          # every command, on 2 processes it starts itself
//   ./dist_tutorial p2p
//   ./dist_tutorial ring-allreduce --numel 4194304 --iters 20
//   ./dist_tutorial train --epochs 1 --limit 12000 --nproc-per-node 3
//   kindling-run --nproc_per_node 2 ./dist_tutorial group-allreduce   # under a launcher
//
// `./dist_tutorial p2p` prints (the order of lines between ranks may vary):
//   dist_tutorial p2p: 2 rank(s), backend gloo, device cpu
//   == p2p: blocking send / recv ==
//   Rank 0 has data 1
//   Rank 1 has data 1
//   == p2p: non-blocking isend / irecv ==
//   Rank 0 started sending
//   Rank 1 started receiving
//   Rank 0 has data 1
//   Rank 1 has data 1
// and `train` prints one "Rank <r>, epoch <e>: loss <mean batch loss>" line per rank and
// epoch, then "test accuracy <pct>%" from rank 0.
#include <kindling/dist/launch_env.h>
#include <kindling/dist/parallel.h>
#include <kindling/error.h>
#include <kindling/kindling.h>

#include <chrono>
#include <exception>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "tutorial.h"

namespace kd = kindling::dist;

namespace dist_tutorial {

namespace {

constexpr int kDefaultNprocPerNode = 2;

const char* const kCommands[] = {"p2p", "group-allreduce", "ring-allreduce", "train", "all"};

// ---------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------

/// Binds every option of the program to `o` (tools/cli/cli.h gives --help and the errors).
void describe_options(CLI::App& app, Options& o) {
  app.description(
      "The programs of PyTorch's \"Writing Distributed Applications\" tutorial on kindling::dist.\n"
      "Commands: p2p (blocking send/recv, then isend/irecv + wait; >= 2 ranks), group-allreduce\n"
      "(all_reduce over the group {0, 1}; >= 2 ranks), ring-allreduce (the tutorial's ring all-reduce\n"
      "and a chunked one, checked against and timed with kindling::dist::all_reduce), train\n"
      "(synchronous SGD with gradient averaging on Fashion-MNIST), all (all of them, in this order).");
  app.add_option("command", o.command, "What to run (default: all)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kCommands), std::end(kCommands))));
  app.add_option("--backend", o.backend, "gloo (default), serial, nccl or mpi");
  app.add_option("--nproc-per-node", o.nproc_per_node,
                 "Processes to start on this node (default 2); under a launcher (kindling-run, torchrun, mpirun, "
                 "srun) leave it out, or give the number the launcher starts on each node")
      ->check(CLI::Range(1, 1024));
  app.add_option("--master-port", o.master_port,
                 "Rendezvous port when this program starts the processes (default: a free port, so that two jobs "
                 "on one machine do not collide; under a launcher the launcher's port is used)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--nnodes", o.nnodes,
                 "Nodes (hosts) of the job when this program starts the processes: run it on every node with "
                 "the same --nnodes, --nproc-per-node, --master-addr and --master-port, and its own --node-rank")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--node-rank", o.node_rank, "This node's index in [0, nnodes) (node 0 runs rank 0)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--master-addr", o.master_addr,
                 "Host name or address of node 0, reachable from every node (required with --nnodes > 1)");
  app.add_option("--timeout", o.timeout_s, "Seconds a collective may wait before it fails")
      ->check(CLI::Range(int64_t{1}, int64_t{86400 * 7}))
      ->capture_default_str();
  app.add_option("--stall-timeout", o.stall_timeout_s,
                 "Seconds without collective progress of a peer before the waiting ranks stop and name it "
                 "(0: off; default: KINDLING_STALL_TIMEOUT, else 60)")
      ->check(kindling::cli::finite_number(kindling::cli::kStallTimeoutSeconds));
  app.add_option("--numel", o.numel, "ring-allreduce: floats per tensor")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--iters", o.iters, "ring-allreduce: timed calls per implementation")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "train: number of epochs")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "train: directory of the Fashion-MNIST *-ubyte.gz files")
      ->capture_default_str();
  app.add_option("--limit", o.limit, "train: use only the first N training samples (default: all 60000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--sync", o.sync,
                 "train: gradients averaged by kindling's DistributedDataParallel (ddp: auto_model, overlapped "
                 "with backward) or by the tutorial's average_gradients after backward (manual)")
      ->check(CLI::IsMember({"ddp", "manual"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the model initialization and random inputs")->capture_default_str();
}

/// p2p and group-allreduce need two ranks: alone they fail with a clear message, as part
/// of `all` they are skipped with a note.
bool enough_ranks(const std::string& command, bool skip) {
  const int size = kd::get_world_size();
  if (size >= 2) return true;
  KINDLING_CHECK(skip, "dist_tutorial ", command, " needs at least 2 ranks, but the world has ", size,
                 "; run it with --nproc-per-node 2 (or more) and a distributed --backend such as gloo");
  say("(skipping ", command, ": it needs at least 2 ranks and the world has ", size, ")");
  return false;
}

// ---------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------

/// What every rank runs (Parallel::run calls it with the local rank).
void run_command(int /*local_rank*/, const Options& o) {
  const bool all = o.command == "all";
  if (kd::get_rank() == 0) {
    say("dist_tutorial ", o.command, ": ", kd::get_world_size(), " rank(s), backend ", kd::backend(), ", device ",
        kd::device().str());
  }
  if ((all || o.command == "p2p") && enough_ranks("p2p", all)) run_p2p();
  if ((all || o.command == "group-allreduce") && enough_ranks("group-allreduce", all)) run_group_all_reduce();
  if (all || o.command == "ring-allreduce") run_ring_all_reduce(o);
  if (all || o.command == "train") run_train(o);
}

/// Spawns kDefaultNprocPerNode processes unless told otherwise, but not under a launcher
/// (nor in the children a Parallel parent starts): there the launcher's layout applies.
kd::ParallelOptions parallel_options(const Options& o) {
  kd::ParallelOptions options(o.backend);
  if (o.nproc_per_node) {
    options.nproc_per_node(*o.nproc_per_node);
  } else if (o.backend != "serial" && !kd::detect_launch_environment().detected()) {
    options.nproc_per_node(kDefaultNprocPerNode);
  }
  if (o.master_port) options.master_port(*o.master_port);
  if (o.nnodes > 1) options.nnodes(o.nnodes).node_rank(o.node_rank);
  if (!o.master_addr.empty()) options.master_addr(o.master_addr);
  options.timeout(std::chrono::seconds(o.timeout_s));
  if (o.stall_timeout_s)
    options.stall_timeout(std::chrono::milliseconds(static_cast<int64_t>(*o.stall_timeout_s * 1000)));
  return options;
}

}  // namespace
}  // namespace dist_tutorial

int main(int argc, char** argv) {
  dist_tutorial::Options options;
  CLI::App app{"", "dist_tutorial"};
  dist_tutorial::describe_options(app, options);
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    // Started directly, this spawns --nproc-per-node copies of the program (each one
    // re-executes main and runs run_command); under a launcher it only initializes.
    kd::Parallel parallel(dist_tutorial::parallel_options(options));
    parallel.run(dist_tutorial::run_command, options);
  } catch (const kindling::LaunchError& e) {
    // A worker failed or was killed, or this launcher was interrupted: kindling-run's codes.
    std::cerr << "dist_tutorial: error: " << e.what() << std::endl;
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "dist_tutorial: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
