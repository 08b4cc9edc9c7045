// Parallel / spawn: option validation, launcher mode, spawn by re-execution and by fork,
// failure propagation, and two "nodes" on one machine. Multi-process cases run a worker of
// this binary (support/multiprocess.h) that itself spawns with Parallel.
#include <gtest/gtest.h>
#include <kindling/kindling.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "support/multiprocess.h"
#include "support/summary.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::follows_first_failure;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

std::string construction_error(const kd::ParallelOptions& options) {
  try {
    kd::Parallel p(options);
  } catch (const kindling::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ParallelOptionsCheck, EveryInvalidCombinationIsRejected) {
  using O = kd::ParallelOptions;
  const std::vector<std::pair<O, std::string>> cases = {
    {O("nope"), "unknown or unavailable backend 'nope'. Available backends: serial"},
    {O().nproc_per_node(2), "backend is not given, so argument 'nproc_per_node' should not be given"},
    {O("serial").master_port(1234), "argument 'master_port' should not be given either (got 1234)"},
    {O().init_method("env://"), "argument 'init_method'"},
    {O("gloo").nproc_per_node(0), "nproc_per_node must be positive, got 0"},
    {O("gloo").nproc_per_node(2).nnodes(0), "nnodes must be positive, got 0"},
    {O("gloo").nproc_per_node(2).nnodes(2), "nnodes is 2, so node_rank must be given"},
    {O("gloo").nproc_per_node(2).nnodes(2).node_rank(2), "node_rank must be between 0 and 1"},
    {O("gloo").nproc_per_node(2).node_rank(1), "node_rank must be between 0 and 0"},
    {O("gloo").nproc_per_node(2).nnodes(2).node_rank(0).master_addr("10.0.0.1"),
     "master_addr and master_port (the address of node 0"},
    {O("gloo").nproc_per_node(2).master_port(70000), "master_port must be a TCP port between 1 and 65535"},
    {O("gloo").nproc_per_node(2).init_method("tcp://127.0.0.1:1").master_port(5), "give one or the other"},
    {O("gloo").nproc_per_node(2).init_method("udp://x"), "unsupported init_method 'udp://x'"},
    {O("gloo").nnodes(2).node_rank(1), "only apply when this program starts the processes"},
    {O("gloo").nproc_per_node(2).timeout(std::chrono::milliseconds(0)), "timeout must be positive"},
    {O("gloo").nproc_per_node(2).nnodes(3).min_nnodes(4).rdzv_endpoint("node0").rdzv_id("j"),
     "min_nnodes must be between 1 and nnodes=3 (the most nodes), got 4"},
    {O("gloo").nproc_per_node(2).nnodes(2).min_nnodes(1), "min_nnodes=1 needs rdzv_endpoint"},
    {O("gloo").nproc_per_node(2).nnodes(2).node_rank(0).master_addr("127.0.0.1").max_restarts(1),
     "max_restarts=1 with nnodes=2 and master_addr (a static rendezvous) would restart each node's children on their "
     "own"},
    {O("gloo").nproc_per_node(2).nnodes(2).rdzv_endpoint("node0"), "needs rdzv_id, the job's identity"},
    {O("gloo").nproc_per_node(2).nnodes(2).rdzv_endpoint("node0").rdzv_id("j").node_rank(1),
     "the rendezvous assigns node ranks"},
    {O("serial").rdzv_endpoint("node0"), "argument 'rdzv_endpoint' should not be given either"},
    {O("gloo").nproc_per_node(2).rdzv_conf("lease=3"), "rdzv_conf='lease=3' needs rdzv_endpoint"},
    {O("gloo").nproc_per_node(2).nnodes(2).rdzv_endpoint("node0").rdzv_id("j").rdzv_conf("keep_alive_interval=x"),
     "rdzv_conf: keep_alive_interval expects seconds (a number from 0.01 to 10000000"},
    {O("gloo").nproc_per_node(2).live_recovery(true), "live_recovery needs rdzv_endpoint"},
    {O("gloo").nproc_per_node(2).rdzv_backend("etcd"), "rdzv_backend 'etcd' needs rdzv_endpoint"},
    {O("gloo").nproc_per_node(2).nnodes(2).rdzv_endpoint("node0").rdzv_id("j").rdzv_backend("etcd-v2"),
     "rdzv_backend is 'c10d' (a node serves the rounds) or 'etcd' (an etcd cluster keeps them), got 'etcd-v2'"},
    {O("gloo").nproc_per_node(2).nnodes(2).rdzv_endpoint("e1:2379,:5").rdzv_id("j").rdzv_backend("etcd"),
     "rdzv_endpoint (etcd members) needs a host, got ':5'"},
#if KINDLING_HAS_MPI
    {O("mpi").nproc_per_node(2),
     "started and connected by MPI's launcher (mpirun, srun --mpi=pmix). Run `mpirun -np 2"},
#endif
  };
  for (const auto& c : cases) {
    const std::string what = construction_error(c.first);
    EXPECT_NE(what.find(c.second), std::string::npos) << "expected '" << c.second << "' in: " << what;
  }
}

// A program written like the README's, whose main lets Parallel's UsageError escape: the
// message once and exit code 1, no abort (SIGABRT, a core) and no "terminate called".
KINDLING_WORKER(parallel_misuse_not_caught) {
  []() noexcept { kd::Parallel p(kd::ParallelOptions("gloo").nproc_per_node(0)); }();
}

TEST(ParallelOptionsCheck, AMisuseTheProgramDoesNotCatchEndsItWithItsMessage) {
  LaunchOptions options;
  options.world_size = 1;
  options.set_dist_env = false;
  const auto results = run_workers("parallel_misuse_not_caught", options);
  ASSERT_EQ(results.size(), 1u);
  const auto& r = results[0];
  EXPECT_EQ(r.signal, 0) << describe(results);
  EXPECT_EQ(r.exit_code, 1) << describe(results);
  const std::string message = "nproc_per_node must be positive, got 0";
  const auto first = r.err.find(message);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(message, first + 1), std::string::npos) << "printed twice:\n" << r.err;
  EXPECT_NE(r.err.find("did not catch this kindling::UsageError"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

TEST(ParallelSerial, RunsTheFunctionOnceWithLocalRankZero) {
  kd::Parallel p;
  EXPECT_EQ(p.mode(), "serial");
  int calls = 0, seen = -1;
  p.run(
      [&](int local_rank, int add) {
        calls += add;
        seen = local_rank;
      },
      1);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, 0);
}

// Under a launcher, nproc_per_node must agree with it.
KINDLING_WORKER(parallel_under_launcher) {
  {
    std::string what;
    try {
      kd::Parallel p(kd::ParallelOptions("gloo").nproc_per_node(3));
    } catch (const kindling::UsageError& e) {
      what = e.what();
    }
    WCHECK(what.find("started by env with 2 processes on this node, but nproc_per_node=3") != std::string::npos,
           << what);
  }
  kd::Parallel p(kd::ParallelOptions("gloo").nproc_per_node(2).timeout(std::chrono::seconds(60)));
  WCHECK(p.mode() == "launcher");
  p.run([](int local_rank) {
    WCHECK(local_rank == kd::get_rank(), << local_rank);
    WCHECK(kd::get_world_size() == 2);
    WCHECK(kd::all_reduce(int64_t{1}) == 2);
  });
}

TEST(ParallelLauncher, OnlyInitializesWhenStartedByALauncher) {
  auto results = run_workers("parallel_under_launcher", LaunchOptions());
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// What each spawned child records, checked by the parent after run() returns.
void record(int local_rank, const std::string& dir) {
  const auto sum = kd::all_reduce(static_cast<int64_t>(kd::get_rank() + 1));
  std::ofstream out(dir + "/child." + std::to_string(kd::get_rank()));
  out << kd::get_rank() << " " << local_rank << " " << kd::get_world_size() << " " << sum << " "
      << kd::get_nproc_per_node() << " " << kd::backend() << " threads=" << std::getenv("OMP_NUM_THREADS") << "/"
      << at::get_num_threads() << "\n";
}

void spawn_and_check(kd::StartMethod method) {
  const std::string dir = std::getenv("KINDLING_TEST_DIR");
  std::cout << "parent before Parallel" << std::endl;
  {
    kd::Parallel p(
        kd::ParallelOptions("gloo").nproc_per_node(3).start_method(method).timeout(std::chrono::seconds(60)));
    // In a re-executed child the same Parallel is in launcher mode.
    WCHECK(p.mode() == (std::getenv("KINDLING_PARALLEL_CHILD") ? "launcher" : "spawn"), << p.mode());
    p.run(record, dir);
  }
  for (int r = 0; r < 3; ++r) {
    std::ifstream in(dir + "/child." + std::to_string(r));
    std::string line;
    std::getline(in, line);
    // The cores shared between the 3 children unless this process's environment chose; a
    // re-executed child's LibTorch takes it, a forked one keeps the parent's thread count.
    const char* chosen = std::getenv("OMP_NUM_THREADS");
    const std::string threads = chosen ? chosen : std::to_string(std::max(1u, std::thread::hardware_concurrency() / 3));
    const std::string effective = method == kd::StartMethod::kExec ? threads : std::to_string(at::get_num_threads());
    const std::string expected =
        std::to_string(r) + " " + std::to_string(r) + " 3 6 3 gloo threads=" + threads + "/" + effective;
    WCHECK(line == expected, << "child " << r << " wrote '" << line << "', expected '" << expected << "'");
  }
  WCHECK(!kd::is_initialized());
  std::cout << "parent after run" << std::endl;
}

KINDLING_WORKER(parallel_spawn_exec) { spawn_and_check(kd::StartMethod::kExec); }
KINDLING_WORKER(parallel_spawn_fork) { spawn_and_check(kd::StartMethod::kFork); }

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

LaunchOptions one_process() {
  LaunchOptions o;
  o.world_size = 1;
  o.set_dist_env = false;
  o.deadline = std::chrono::seconds(90);
  return o;
}

TEST(ParallelSpawn, ReexecutesTheProgramAndRunsTheFunctionOnEveryRank) {
  auto results = run_workers("parallel_spawn_exec", one_process());
  ASSERT_TRUE(results[0].ok()) << describe(results);
  // Code before Parallel runs in the parent and in each re-executed child; code after
  // run() only in the parent.
  EXPECT_EQ(count(results[0].out, "parent before Parallel"), 4u) << results[0].out;
  EXPECT_EQ(count(results[0].out, "parent after run"), 1u) << results[0].out;
}

TEST(ParallelSpawn, ForkStartMethod) {
  auto results = run_workers("parallel_spawn_fork", one_process());
  ASSERT_TRUE(results[0].ok()) << describe(results);
  EXPECT_EQ(count(results[0].out, "parent before Parallel"), 1u) << results[0].out;
  EXPECT_EQ(count(results[0].out, "parent after run"), 1u) << results[0].out;
}

void fail_on_rank_one(int) {
  if (kd::get_rank() == 1) throw std::runtime_error("deliberate failure on rank 1");
  kd::barrier();  // ranks 0 and 2 wait here until they are stopped
}

KINDLING_WORKER(parallel_child_fails) {
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    kd::spawn(kd::ParallelOptions("gloo").nproc_per_node(3).timeout(std::chrono::seconds(120)), fail_on_rank_one);
  } catch (const kindling::LaunchError& e) {
    what = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Rank 1 first; ranks 0 and 2 may also fail on their own (the peer lost) before SIGTERM ends
  // them, and then count too, named after rank 1.
  WCHECK(what.find(" of 3 workers failed:\n  rank 1 (local rank 1") != std::string::npos, << what);
  WCHECK(what.find("exited with code 1") != std::string::npos, << what);
  WCHECK(what.find("deliberate failure on rank 1") != std::string::npos, << what);
  WCHECK(follows_first_failure(what, 0) && follows_first_failure(what, 2), << what);
  WCHECK(seconds < 20, << "took " << seconds << " s");
  std::cout << "caught in " << seconds << " s" << std::endl;
}

TEST(ParallelSpawn, AFailingChildStopsTheOthersAndIsNamed) {
  auto results = run_workers("parallel_child_fails", one_process());
  EXPECT_TRUE(results[0].ok()) << describe(results);
}

// Two "nodes" on one machine: two programs, each spawning 2 processes.
KINDLING_WORKER(parallel_two_nodes) {
  const int node = std::atoi(std::getenv("KINDLING_TEST_RANK"));
  const int port = std::atoi(std::getenv("KINDLING_TEST_PORT"));
  kd::Parallel p(kd::ParallelOptions("gloo")
                     .nproc_per_node(2)
                     .nnodes(2)
                     .node_rank(node)
                     .master_addr("127.0.0.1")
                     .master_port(port)
                     .timeout(std::chrono::seconds(60)));
  p.run([node](int local_rank) {
    WCHECK(kd::get_world_size() == 4);
    WCHECK(kd::get_rank() == node * 2 + local_rank, << kd::get_rank());
    WCHECK(kd::get_node_rank() == node && kd::get_nnodes() == 2 && kd::get_nproc_per_node() == 2);
    WCHECK(kd::all_reduce(int64_t{kd::get_rank()}) == 6);
  });
}

TEST(ParallelSpawn, TwoNodesOnOneMachineFormOneJob) {
  LaunchOptions o;
  o.world_size = 2;
  o.set_dist_env = false;
  o.deadline = std::chrono::seconds(90);
  auto results = run_workers("parallel_two_nodes", o);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// Two elastic "nodes" on one machine (rdzv_endpoint: the rendezvous rounds of kindling-run
// --nnodes MIN:MAX, in the program): the rendezvous gives them node ranks 0 and 1.
KINDLING_WORKER(parallel_elastic_nodes) {
  const int port = std::atoi(std::getenv("KINDLING_TEST_PORT"));
  kd::Parallel p(kd::ParallelOptions("gloo")
                     .nproc_per_node(2)
                     .nnodes(2)
                     .rdzv_endpoint("127.0.0.1:" + std::to_string(port))
                     .rdzv_id("parallel-elastic")
                     .timeout(std::chrono::seconds(60)));
  p.run([](int local_rank) {
    WCHECK(kd::get_world_size() == 4);
    WCHECK(kd::get_rank() == kd::get_node_rank() * 2 + local_rank, << kd::get_rank());
    WCHECK(kd::get_nnodes() == 2 && kd::get_nproc_per_node() == 2);
    WCHECK(kd::all_reduce(int64_t{kd::get_rank()}) == 6);
    std::printf("ELASTIC rank %d node %d\n", kd::get_rank(), kd::get_node_rank());
  });
}

TEST(ParallelSpawn, ElasticNodesOnOneMachineFormOneJob) {
  LaunchOptions o;
  o.world_size = 2;
  o.set_dist_env = false;
  o.deadline = std::chrono::seconds(90);
  auto results = run_workers("parallel_elastic_nodes", o);
  std::string all;
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok()) << describe(results);
    all += r.out;
  }
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(all.find("ELASTIC rank " + std::to_string(rank) + " node " + std::to_string(rank / 2)),
              std::string::npos)
        << all;
  }
}

}  // namespace
