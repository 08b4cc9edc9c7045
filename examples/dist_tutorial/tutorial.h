#pragma once
// What the parts of dist_tutorial share: the options every rank gets, the output helpers,
// and the commands (p2p.cpp, group_allreduce.cpp, ring_allreduce.cpp, train.cpp).
#include <cstdint>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

namespace dist_tutorial {

/// Everything the command line sets; passed to every rank by Parallel::run.
struct Options {
  std::string command = "all";
  std::string backend = "gloo";
  std::optional<int> nproc_per_node;  // unset: kDefaultNprocPerNode, or the launcher's layout
  std::optional<int> master_port;     // unset: a free port
  int nnodes = 1;                     // spawn mode across hosts: nodes of the job
  int node_rank = 0;                  // and this node's index
  std::string master_addr;            // rank 0's host (required with nnodes > 1)
  int64_t timeout_s = 600;            // collective timeout
  std::optional<double> stall_timeout_s;  // unset: KINDLING_STALL_TIMEOUT, else the library's 60 s
  int64_t numel = int64_t{1} << 20;
  int iters = 10;
  int epochs = 3;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t limit = -1;  // -1: every training sample
  uint64_t seed = 1234;
  std::string sync = "ddp";  // train: "ddp" (kindling::dist::auto_model) or "manual" (the tutorial's average_gradients)
};

// ---------------------------------------------------------------------------------------
// Output helpers (output.cpp)
// ---------------------------------------------------------------------------------------

/// Prints one line with a single write, so lines of different ranks do not interleave.
template <typename... Parts>
void say(const Parts&... parts) {
  std::ostringstream line;
  (line << ... << parts);
  line << '\n';
  std::cout << line.str() << std::flush;
}

/// `value` with `digits` digits after the decimal point.
std::string fixed(double value, int digits);

/// A title printed by rank 0, fenced by barriers so that it comes before the section's
/// output of every rank. Every rank must call it.
void section(const std::string& title);

// ---------------------------------------------------------------------------------------
// Commands: every rank of the world calls them
// ---------------------------------------------------------------------------------------

/// p2p: blocking send / recv, then non-blocking isend / irecv, between ranks 0 and 1.
void run_p2p();
/// group-allreduce: all_reduce over the group {0, 1}.
void run_group_all_reduce();
/// ring-allreduce: the hand-made rings, checked against and timed with the built-in all_reduce.
void run_ring_all_reduce(const Options& o);
/// train: synchronous SGD with gradient averaging on Fashion-MNIST.
void run_train(const Options& o);

}  // namespace dist_tutorial
