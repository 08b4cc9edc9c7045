// Failures end in clear errors within the timeout, never in a hang: a collective that only
// some ranks call, a peer killed mid-collective, a rank that never joins, mismatched types.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <kindling/kindling.h>

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "support/errors.h"
#include "support/multiprocess.h"
#include "support/reset_proxy.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

KINDLING_WORKER(skipped_collective) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(3)));
  kd::barrier();
  if (kd::get_rank() == 2) {  // rank 2 "forgets" the all_reduce, until the others have timed out
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::_Exit(0);
  }
  try {
    kd::all_reduce(at::ones({8}));
  } catch (const kindling::TimeoutError& e) {
    const std::string msg = e.what();
    std::cout << "ERROR: " << msg << std::endl;
    WCHECK(msg.find("kindling::dist::all_reduce") != std::string::npos, << msg);
    WCHECK(msg.find("ranks that did not arrive: 2 ") != std::string::npos, << msg);
    WCHECK(msg.find("[rank " + std::to_string(kd::get_rank()) + "/3]") != std::string::npos, << msg);
    // Rank 0 hosts the store that holds the progress counters: stay until rank 1 has read them.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::_Exit(0);
  }
  WCHECK(false, << "all_reduce must time out");
}

TEST(FailureTest, CollectiveCalledBySomeRanksTimesOutNamingMissingRanks) {
  LaunchOptions opts;
  opts.world_size = 3;
  opts.deadline = std::chrono::seconds(40);
  auto results = run_workers("skipped_collective", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
  for (int r : {0, 1}) EXPECT_LT(results[r].seconds, 15.0) << "the timeout is 3 s";
}

KINDLING_WORKER(killed_peer) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(20)));
  auto t = at::ones({1 << 20});
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000; ++i) {
      if (i == 3 && kd::get_rank() == 1) std::raise(SIGKILL);
      kd::all_reduce(t);
    }
  } catch (const kindling::Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "ERROR after " << s << " s: " << e.what() << std::endl;
    WCHECK(std::string(e.what()).find("kindling::dist::all_reduce") != std::string::npos);
    WCHECK(s < 25.0, << "error must come within the timeout, came after " << s);
    std::_Exit(0);
  }
  WCHECK(false, << "the survivors must get an error");
}

TEST(FailureTest, PeerKilledMidCollectiveGivesSurvivorsAnError) {
  LaunchOptions opts;
  opts.world_size = 3;
  opts.deadline = std::chrono::seconds(60);
  auto results = run_workers("killed_peer", opts);
  EXPECT_EQ(results[1].signal, SIGKILL) << describe(results);
  EXPECT_TRUE(results[0].ok()) << describe(results);
  EXPECT_TRUE(results[2].ok()) << describe(results);
}

KINDLING_WORKER(lonely_rank) {
  try {
    kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(3)));
  } catch (const kindling::TimeoutError& e) {
    std::cout << "ERROR: " << e.what() << std::endl;
    WCHECK(std::string(e.what()).find("not joined yet: 1") != std::string::npos ||
               std::string(e.what()).find("did not arrive: 1") != std::string::npos,
           << e.what());
    return;
  }
  WCHECK(false, << "initialize must time out when rank 1 never starts");
}

TEST(FailureTest, RendezvousTimesOutNamingTheRankThatNeverJoined) {
  LaunchOptions opts;
  opts.world_size = 2;
  opts.deadline = std::chrono::seconds(40);
  opts.commands[1] = {"/bin/true"};
  auto results = run_workers("lonely_rank", opts);
  EXPECT_TRUE(results[0].ok()) << describe(results);
  EXPECT_LT(results[0].seconds, 20.0) << describe(results);
}

KINDLING_WORKER(mismatched_types) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(20)));
  try {
    if (kd::get_rank() == 0) {
      kd::all_gather_object(std::vector<int>{1, 2});
    } else {
      kd::all_gather_object(std::string("not a vector"));
    }
  } catch (const kindling::UsageError& e) {
    const std::string expect = kd::get_rank() == 0
                                   ? "rank 1 sent a value of type 'string' but this rank expects 'vector<int32>'"
                                   : "rank 0 sent a value of type 'vector<int32>' but this rank expects 'string'";
    WCHECK(std::string(e.what()).find(expect) != std::string::npos, << e.what());
    kd::finalize();
    return;
  }
  WCHECK(false, << "mismatched types must be reported");
}

TEST(FailureTest, MismatchedValueTypesAreReported) {
  LaunchOptions opts;
  opts.world_size = 2;
  auto results = run_workers("mismatched_types", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

#if KINDLING_HAS_MPI
// mpi: a blocking MPI collective cannot be cancelled, so the watchdog ends the job with a
// message naming the call and the rank, within the timeout (plus MPI_Abort's teardown).
KINDLING_WORKER(mpi_skipped_collective) {
  kd::initialize("mpi", kd::InitOptions().timeout(std::chrono::seconds(2)));
  kd::barrier();
  if (kd::get_rank() == 1) {  // rank 1 "forgets" the all_reduce and waits to be ended
    std::this_thread::sleep_for(std::chrono::seconds(30));
    std::_Exit(0);
  }
  kd::all_reduce(at::ones({8}));
  WCHECK(false, << "all_reduce must not complete");
}

TEST(FailureTest, MpiCollectiveCalledBySomeRanksEndsTheJobWithAMessage) {
  LaunchOptions opts;
  opts.backend = "mpi";
  opts.world_size = 2;
  opts.deadline = std::chrono::seconds(40);
  auto results = run_workers("mpi_skipped_collective", opts);
  EXPECT_FALSE(results[0].timed_out) << describe(results);
  EXPECT_LT(results[0].seconds, 20.0) << describe(results);
  EXPECT_NE(results[0].exit_code, 0) << describe(results);
  EXPECT_NE(results[0].err.find("[rank 0/2] kindling::dist (mpi backend): MPI_Allreduce did not complete within the "
                                "timeout of "),
            std::string::npos)
      << describe(results);
}

// MPI has no 16-bit floats: kindling reduces them with its own MPI ops (sum, product, min,
// max, in float32 and rounded back); bitwise ops on them are refused before any engine.
KINDLING_WORKER(mpi_half_precision) {
  kd::initialize("mpi");
  const int rank = kd::get_rank();
  auto sum = kd::all_reduce(at::full({5}, 1.5, at::kHalf));
  WCHECK(sum.scalar_type() == at::kHalf && sum.to(at::kFloat).eq(3.0f).all().item<bool>(), << sum);
  auto top = kd::all_reduce(at::full({3}, static_cast<double>(rank) + 0.5, at::kBFloat16), kd::ReduceOp::kMax);
  WCHECK(top.to(at::kFloat).eq(1.5f).all().item<bool>(), << top);
  std::string what;
  try {
    kd::all_reduce(at::ones({4}, at::kHalf), kd::ReduceOp::kAnd);
  } catch (const kindling::UsageError& e) {
    what = e.what();
  }
  WCHECK(what.find("AND is a bitwise reduction and needs an integral or bool tensor, got Half") != std::string::npos,
         << what);
  auto h = at::full({4}, static_cast<double>(rank + 1), at::kHalf);
  kd::broadcast(h, 1);  // moved as 16-bit words
  WCHECK(h.to(at::kFloat).eq(2.0f).all().item<bool>(), << h);
  kd::finalize();
}

TEST(FailureTest, MpiReducesHalfPrecisionAndRefusesBitwiseOpsOnFloats) {
  LaunchOptions opts;
  opts.backend = "mpi";
  opts.world_size = 2;
  auto results = run_workers("mpi_half_precision", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}
#endif

// Collective fingerprints (KINDLING_DISTRIBUTED_DEBUG=DETAIL): a shape or an op that differs
// between the ranks (all_reduce's shape, reduce_scatter's and all_gather_into's chunks) is an
// error on every rank listing each rank's call; matching calls work.
KINDLING_WORKER(fingerprint_mismatch) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(20)));
  const int rank = kd::get_rank();
  auto ok = at::ones({4});
  kd::all_reduce(ok);
  WCHECK(ok[0].item<float>() == 2.0f);
  try {
    kd::all_reduce(at::ones({rank == 0 ? 4 : 5}));
    WCHECK(false, << "different shapes must be refused");
  } catch (const kindling::UsageError& e) {
    WCHECK(std::string(e.what()).find("rank 0: all_reduce Float [4]; rank 1: all_reduce Float [5]") !=
               std::string::npos,
           << e.what());
  }
  try {
    if (rank == 0) {
      kd::all_reduce(at::ones({3}));
    } else {
      kd::broadcast(at::ones({3}), 0);
    }
    WCHECK(false, << "different collectives must be refused");
  } catch (const kindling::UsageError& e) {
    WCHECK(std::string(e.what()).find("rank 0: all_reduce Float [3]; rank 1: broadcast Float [3]") !=
               std::string::npos,
           << e.what());
  }
  // Chunks of another length on one rank, each call valid on its own.
  const int64_t len = rank == 0 ? 4 : 3;
  for (const bool async : {true, false}) {
    const std::string msg = kindling::testing::error_of<kindling::UsageError>([&] {
      if (async) {
        kd::reduce_scatter_async(at::zeros({len}), at::zeros({2 * len})).wait();
      } else {
        kd::all_gather_into(at::zeros({2 * len}), at::zeros({len}));
      }
    });
    const std::string want = async ? "rank 0: reduce_scatter_async Float [8]; rank 1: reduce_scatter_async Float [6]"
                                   : "rank 0: all_gather_into Float [4]; rank 1: all_gather_into Float [3]";
    WCHECK(msg.find(want) != std::string::npos, << msg);
  }
  // The refused collectives never reached the engine: the group is still usable.
  kd::barrier();
  kd::finalize();
}

TEST(FailureTest, FingerprintsNameEachRanksCallOnAMismatch) {
  LaunchOptions opts;
  opts.world_size = 2;
  opts.env["KINDLING_DISTRIBUTED_DEBUG"] = "DETAIL";
  auto results = run_workers("fingerprint_mismatch", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// The store's connections are reset while the ranks train (its host's machine dropped
// them, or it was killed mid-handshake): no thread may end the process over it, and the
// next store operation is a CommunicationError about the store. Rank 1 reaches the store
// through a proxy that resets every connection once the marker file exists.
KINDLING_WORKER(store_connection_reset) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(10)));
  WCHECK(kd::all_reduce(1) == 2, << "before the reset");
  if (kd::get_rank() == 1) {
    std::ofstream(std::getenv("KINDLING_TEST_RESET_MARKER")) << "reset\n";
    // LibTorch 1.13's own store client ended the process here (SIGABRT from its watch thread).
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  WCHECK(kd::all_reduce(2) == 4, << "the process group does not need the store");
  if (kd::get_rank() == 1) {
    const std::string msg = kindling::testing::error_of<kindling::CommunicationError>([] { kd::new_group({0, 1}); });
    std::cout << "ERROR: " << msg << std::endl;
    WCHECK(msg.find("new_group") != std::string::npos && msg.find("rendezvous store failed") != std::string::npos,
           << msg);
    WCHECK(msg.find("reset") != std::string::npos || msg.find("closed") != std::string::npos, << msg);
  }
  kd::finalize();
}

TEST(FailureTest, StoreConnectionResetIsACommunicationErrorNotACrash) {
  char dir[] = "/tmp/kindling-reset-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string marker = std::string(dir) + "/marker";
  const int store_port = kindling::testing::free_port();
  kindling::testing::ResetProxy proxy(store_port, marker);
  LaunchOptions opts;
  opts.world_size = 2;
  opts.env = {{"MASTER_PORT", std::to_string(store_port)}, {"KINDLING_TEST_RESET_MARKER", marker}};
  opts.rank_env[1] = {{"MASTER_PORT", std::to_string(proxy.port())}};
  opts.deadline = std::chrono::seconds(60);
  auto results = run_workers("store_connection_reset", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
  std::remove(marker.c_str());
  ::rmdir(dir);
}

// A rank that fails while starting, or that clashes with another (a rank number given
// twice, another world size), ends every rank within seconds with its cause, instead of
// leaving the others in the rendezvous until its timeout (60 s here).
KINDLING_WORKER(start_world) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  kd::barrier();
  kd::finalize();
}

namespace {

std::vector<kindling::testing::RankResult> start_with(int world_size,
                                                      std::map<int, std::map<std::string, std::string>> rank_env) {
  LaunchOptions opts;
  opts.world_size = world_size;
  opts.deadline = std::chrono::seconds(50);
  opts.rank_env = std::move(rank_env);
  auto results = run_workers("start_world", opts);
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok()) << describe(results);
    EXPECT_FALSE(r.timed_out) << describe(results);
    EXPECT_LT(r.seconds, 15.0) << "rank " << r.rank << " waited: " << describe(results);
  }
  return results;
}

}  // namespace

TEST(FailureTest, ARankThatFailsWhileStartingEndsEveryRankWithItsCause) {
  const auto results = start_with(2, {{1, {{"GLOO_SOCKET_IFNAME", "kdl-absent0"}}}});
  ASSERT_EQ(results.size(), 2u);
  const std::string refused = "GLOO_SOCKET_IFNAME='kdl-absent0' names no network interface of host " + kd::hostname() +
                              "; its interfaces are: ";
  EXPECT_NE(results[1].err.find(refused), std::string::npos) << describe(results);
  EXPECT_NE(results[0].err.find("rank 1 on host " + kd::hostname() + " failed while starting"), std::string::npos)
      << describe(results);
  EXPECT_NE(results[0].err.find(refused), std::string::npos) << describe(results);
}

TEST(FailureTest, ARankNumberGivenTwiceIsRefusedOnEveryRank) {
  const auto results = start_with(3, {{2, {{"RANK", "1"}, {"LOCAL_RANK", "1"}}}});  // ranks 0, 1, 1
  for (const auto& r : results) {
    EXPECT_NE(r.err.find("rank 1 was started twice, here and on host " + kd::hostname()), std::string::npos)
        << describe(results);
  }
  EXPECT_NE(results[0].err.find("give each node its own --node_rank"), std::string::npos) << describe(results);
}

TEST(FailureTest, AnotherWorldSizeOnOneRankIsRefusedOnEveryRank) {
  const auto results = start_with(2, {{1, {{"WORLD_SIZE", "3"}}}});
  for (const auto& r : results) {
    EXPECT_TRUE(r.err.find("was started for a world of 3 ranks, but rank 0") != std::string::npos ||
                r.err.find("was started for a world of 2 ranks, but rank 1") != std::string::npos)
        << describe(results);
    EXPECT_NE(r.err.find("the same --nnodes and --nproc_per_node"), std::string::npos) << describe(results);
  }
}

// Variables of a launcher left in the shell (here mpirun's, for a world of 2) make a plain
// program wait for a rank that never comes: after 5 s it says so, naming the variables.
KINDLING_WORKER(stale_launcher_variables) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(8)));
}

TEST(FailureTest, AWaitCausedByStaleLauncherVariablesSaysWhich) {
  LaunchOptions opts;
  opts.world_size = 1;
  opts.set_dist_env = false;
  opts.deadline = std::chrono::seconds(40);
  opts.env = {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", std::to_string(kindling::testing::free_port())}};
  const auto results = run_workers("stale_launcher_variables", opts);
  ASSERT_EQ(results.size(), 1u);
  const std::string& err = results[0].err;
  EXPECT_FALSE(results[0].ok()) << describe(results);
  EXPECT_NE(err.find("after 5 s: this process is rank 0 of 2 because of the launcher's variables (launcher: mpirun; "),
            std::string::npos)
      << describe(results);
  EXPECT_NE(err.find("OMPI_COMM_WORLD_SIZE=2"), std::string::npos) << describe(results);
  EXPECT_NE(err.find("left over in the shell: unset them"), std::string::npos) << describe(results);
}
