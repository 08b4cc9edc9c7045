// Hung ranks are found within the stall period and named, whichever rank hangs (rank 0,
// which hosts the rendezvous store, included); rendezvous failures that cannot heal fail
// fast with a kindling::Error. Real processes and real gloo on loopback.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <kindling/kindling.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "support/files.h"
#include "support/multiprocess.h"
#include "support/silent_port.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
int env_int(const char* name) { return std::atoi(std::getenv(name)); }
}  // namespace

// Every rank all-reduces in a loop; rank STALL_RANK stops itself (SIGSTOP) at step 5. The
// others must give up within the stall period (3 s) plus 10 s, naming it, long before the
// 120 s collective timeout; then one of them kills the stopped process (pids exchanged first).
KINDLING_WORKER(stopped_rank) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(120)).stall_timeout(std::chrono::seconds(3)));
  const int stalled = env_int("STALL_RANK");
  const auto pids = kd::all_gather(static_cast<int64_t>(::getpid()));
  auto t = at::ones({1024});
  auto last_ok = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 100000; ++i) {
      if (i == 5 && kd::get_rank() == stalled) ::raise(SIGSTOP);
      kd::all_reduce(t);
      last_ok = std::chrono::steady_clock::now();
    }
  } catch (const kindling::TimeoutError& e) {
    const std::string msg = e.what();
    const double waited = seconds_since(last_ok);
    std::cout << "ERROR after " << waited << " s: " << msg << std::endl;
    WCHECK(msg.find("stalled: rank " + std::to_string(stalled) + " ") != std::string::npos, << msg);
    WCHECK(msg.find("kindling::dist::all_reduce") != std::string::npos, << msg);
    WCHECK(waited >= 2.5 && waited < 13.0, << "gave up after " << waited << " s; the stall period is 3 s");
    // The collective layer refuses further use instead of hanging.
    try {
      kd::barrier();
      WCHECK(false, << "a broken process group must refuse new collectives");
    } catch (const kindling::CommunicationError& again) {
      WCHECK(std::string(again.what()).find("an earlier collective failed") != std::string::npos, << again.what());
    }
    // Killing the stopped rank resets its connections, which the survivors that have not
    // given up yet would see as a crashed peer: the killer first waits (at most 15 s) until
    // every survivor has left a mark that it reached its verdict.
    const std::string marks = std::getenv("MARK_DIR");
    std::ofstream(marks + "/" + std::to_string(kd::get_rank())).put('x');
    if (kd::get_rank() == (stalled == 0 ? 1 : 0)) {
      const auto since = std::chrono::steady_clock::now();
      while (kindling::testing::files_in(marks).size() < 2 && seconds_since(since) < 15.0)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ::kill(static_cast<pid_t>(pids[stalled]), SIGKILL);
    }
    const auto finalize_start = std::chrono::steady_clock::now();
    kd::finalize();  // must not wait for the engine's blocked threads
    WCHECK(seconds_since(finalize_start) < 5.0, << "finalize took " << seconds_since(finalize_start) << " s");
    std::cout.flush();
    std::_Exit(0);
  }
  WCHECK(false, << "the loop must end in a TimeoutError");
}

class StoppedRank : public ::testing::TestWithParam<int> {};

TEST_P(StoppedRank, IsNamedByEveryOtherRankWithinTheStallPeriod) {
  const int stalled = GetParam();
  LaunchOptions opts;
  opts.world_size = 3;
  opts.deadline = std::chrono::seconds(60);
  opts.env["STALL_RANK"] = std::to_string(stalled);
  const kindling::testing::TempDir marks_folder("stall");
  const std::string marks = marks_folder.path();
  opts.env["MARK_DIR"] = marks;
  const auto start = std::chrono::steady_clock::now();
  auto results = run_workers("stopped_rank", opts);
  std::filesystem::remove_all(marks);
  for (int r = 0; r < 3; ++r) {
    if (r == stalled) {
      EXPECT_EQ(results[r].signal, SIGKILL) << describe(results);
    } else {
      EXPECT_TRUE(results[r].ok()) << describe(results);
    }
  }
  EXPECT_LT(seconds_since(start), 40.0) << describe(results);
}

INSTANTIATE_TEST_SUITE_P(StallTest, StoppedRank, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& i) { return "rank" + std::to_string(i.param); });

// A slow but steady peer is not stalled: rank 1 computes for 1.5 s before each of 3
// collectives, under a stall period of 3 s, and the job completes.
KINDLING_WORKER(slow_rank) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)).stall_timeout(std::chrono::seconds(3)));
  auto t = at::ones({16});
  for (int i = 0; i < 3; ++i) {
    if (kd::get_rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    kd::all_reduce(t);
  }
  WCHECK(t[0].item<float>() == 8.0f, << t[0].item<float>());
  kd::finalize();
}

TEST(StallTest, SlowRankWithinTheStallPeriodIsNotStalled) {
  LaunchOptions opts;
  opts.world_size = 2;
  opts.deadline = std::chrono::seconds(60);
  auto results = run_workers("slow_rank", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// Rank FINISHER leaves after one all_gather (finalize(), as after a loop that ended earlier
// on it); the others call one more collective (a metric's compute() reached by some ranks
// only). They fail at once saying that it finished, not that it probably crashed; each
// leaves a mark and stays until every waiting rank has read the store (at most 10 s).
KINDLING_WORKER(rank_that_finished) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int finisher = env_int("FINISHER");
  kd::all_gather(static_cast<int64_t>(kd::get_rank()));
  if (kd::get_rank() == finisher) {
    kd::finalize();
    return;
  }
  auto t = at::ones({4});
  const auto start = std::chrono::steady_clock::now();
  try {
    kd::all_reduce(t);
    WCHECK(false, << "the all_reduce cannot complete without rank " << finisher);
  } catch (const kindling::CommunicationError& e) {
    const std::string msg = e.what();
    std::cout << "ERROR after " << seconds_since(start) << " s: " << msg << std::endl;
    // (initialize's own agreement is collective #1: the all_gather is #2, the all_reduce #3.)
    WCHECK(msg.find("kindling::dist::all_reduce on the world (collective #3 of this rank on it) cannot complete: "
                    "rank " + std::to_string(finisher) + " on host ") != std::string::npos, << msg);
    WCHECK(msg.find(" finished (it called finalize() after its collective #2 all_gather on this group) while this "
                    "rank waited in it") != std::string::npos, << msg);
    WCHECK(msg.find("a metric's compute()") != std::string::npos, << msg);
    WCHECK(seconds_since(start) < 10.0, << "failed after " << seconds_since(start) << " s");
  }
  const std::string marks = std::getenv("MARK_DIR");
  std::ofstream(marks + "/" + std::to_string(kd::get_rank())).put('x');
  const auto since = std::chrono::steady_clock::now();
  while (static_cast<int>(kindling::testing::files_in(marks).size()) < kd::get_world_size() - 1 &&
         seconds_since(since) < 10.0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kd::finalize();
}

TEST(StallTest, ARankThatFinishedIsNamedByTheRanksStillInACollective) {
  for (const auto& [world, finisher] : {std::pair<int, int>{2, 1}, {3, 2}, {3, 1}}) {
    LaunchOptions opts;
    opts.world_size = world;
    opts.deadline = std::chrono::seconds(60);
    opts.env["FINISHER"] = std::to_string(finisher);
    const kindling::testing::TempDir marks_folder("finished");
    const std::string marks = marks_folder.path();
    opts.env["MARK_DIR"] = marks;
    auto results = run_workers("rank_that_finished", opts);
    std::filesystem::remove_all(marks);
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << world << " ranks, rank " << finisher << " finishes:\n"
                                                      << describe(results);
  }
}

// Rendezvous failures that cannot heal fail at once with a kindling::Error naming the cause.
KINDLING_WORKER(unresolvable_master) {
  const auto start = std::chrono::steady_clock::now();
  try {
    kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  } catch (const kindling::UsageError& e) {
    std::cout << "ERROR: " << e.what() << std::endl;
    WCHECK(std::string(e.what()).find("MASTER_ADDR='no-such-host.invalid' does not resolve") != std::string::npos,
           << e.what());
    WCHECK(seconds_since(start) < 10.0, << seconds_since(start));
    return;
  }
  WCHECK(false, << "initialize must fail");
}

TEST(StallTest, UnresolvableMasterAddrFailsAtOnce) {
  LaunchOptions opts;
  opts.world_size = 2;
  opts.deadline = std::chrono::seconds(40);
  opts.env["MASTER_ADDR"] = "no-such-host.invalid";
  auto results = run_workers("unresolvable_master", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

KINDLING_WORKER(missing_store_folder) {
  const auto start = std::chrono::steady_clock::now();
  try {
    kd::initialize("gloo",
                   kd::InitOptions().init_method("file:///no/such/folder/store").timeout(std::chrono::seconds(60)));
  } catch (const kindling::UsageError& e) {
    WCHECK(std::string(e.what()).find("the folder '/no/such/folder' of init_method") != std::string::npos, << e.what());
    WCHECK(std::string(e.what()).find("does not exist") != std::string::npos, << e.what());
    WCHECK(seconds_since(start) < 5.0, << seconds_since(start));
    return;
  }
  WCHECK(false, << "initialize must fail");
}

TEST(StallTest, MissingFileStoreFolderFailsAtOnce) {
  LaunchOptions opts;
  opts.world_size = 2;
  auto results = run_workers("missing_store_folder", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// Rank 1 finds MASTER_PORT held by a program that accepts connections and never answers.
KINDLING_WORKER(port_held_by_stranger) {
  const auto start = std::chrono::steady_clock::now();
  try {
    // The answer is awaited for min(timeout, 10 s): a short timeout keeps the test short.
    kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(3)));
  } catch (const kindling::UsageError& e) {
    std::cout << "ERROR: " << e.what() << std::endl;
    WCHECK(std::string(e.what()).find("accepts connections but did not answer as a rendezvous store within 3000 ms") !=
               std::string::npos,
           << e.what());
    WCHECK(seconds_since(start) < 20.0, << seconds_since(start));
    std::cout.flush();
    std::_Exit(0);  // the connecting thread is still blocked on the stranger
  }
  WCHECK(false, << "initialize must fail");
}

TEST(StallTest, PortHeldByAnotherProgramFailsFast) {
  const kindling::testing::SilentPort stranger;
  LaunchOptions opts;
  opts.world_size = 2;
  opts.deadline = std::chrono::seconds(60);
  opts.env["MASTER_PORT"] = std::to_string(stranger.port());
  opts.commands[0] = {"/bin/true"};  // rank 0 never starts its store: the stranger holds the port
  auto results = run_workers("port_held_by_stranger", opts);
  EXPECT_TRUE(results[1].ok()) << describe(results);
}

#if KINDLING_HAS_MPI
// mpi under a real mpirun: rank STALL_RANK stops itself at step 5 while the others
// all-reduce NUMEL floats in a loop: small tensors through a blocking MPI_Allreduce, large
// ones through the shared-memory all_reduce. Neither can be left (nor MPI finalized) without
// the stopped rank, so the waiting ranks log which rank stalled and end the job (MPI_Abort),
// and mpirun stops every process, the stopped one included.
KINDLING_WORKER(mpi_stopped_rank) {
  kd::initialize("mpi", kd::InitOptions().timeout(std::chrono::seconds(120)).stall_timeout(std::chrono::seconds(3)));
  const int stalled = env_int("STALL_RANK");
  auto t = at::ones({env_int("NUMEL")});
  for (int i = 0; i < 1000000; ++i) {
    if (i == 5 && kd::get_rank() == stalled) ::raise(SIGSTOP);
    kd::all_reduce(t);
  }
  WCHECK(false, << "the loop must end with the job");
}

struct MpiStall {
  int rank;
  int numel;
};

class MpiStoppedRank : public ::testing::TestWithParam<MpiStall> {};

TEST_P(MpiStoppedRank, IsNamedAndTheJobEndsWithinTheStallPeriod) {
  const auto p = GetParam();
  LaunchOptions opts;
  opts.backend = "mpi";
  opts.world_size = 3;
  opts.deadline = std::chrono::seconds(60);
  opts.env["STALL_RANK"] = std::to_string(p.rank);
  opts.env["NUMEL"] = std::to_string(p.numel);
  auto results = run_workers("mpi_stopped_rank", opts);
  ASSERT_FALSE(results[0].timed_out) << describe(results);
  // Start-up, 5 steps, the 3 s stall period, then mpirun's teardown: far below the 120 s timeout.
  EXPECT_LT(results[0].seconds, 30.0) << describe(results);
  int named = 0;
  for (int r = 0; r < 3; ++r) {
    if (r == p.rank) continue;
    const std::string& err = results[r].err;
    if (err.find("stalled: rank " + std::to_string(p.rank) + " ") != std::string::npos) ++named;
    EXPECT_EQ(err.find("did not complete within the timeout"), std::string::npos) << describe(results);
  }
  // mpirun may end the second rank before it writes its own report.
  EXPECT_GE(named, 1) << describe(results);
}

INSTANTIATE_TEST_SUITE_P(StallTest, MpiStoppedRank, ::testing::Values(MpiStall{0, 16}, MpiStall{2, 1 << 16}),
                         [](const ::testing::TestParamInfo<MpiStall>& i) {
                           return "rank" + std::to_string(i.param.rank) +
                                  (i.param.numel < 1024 ? "_blocking_call" : "_shared_memory");
                         });
#endif
