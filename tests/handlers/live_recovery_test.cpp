// kh::LiveRecovery and kindling::dist::rejoin in one process, without kindling-run's
// --live_recovery: commits, the first world's keep(), and errors that leave run(). Across hosts,
// with the launcher: tests/cluster/live_test.py.
#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "kindling/dist/live.h"
#include "kindling/error.h"
#include "kindling/handlers/checkpointing/live_recovery.h"
#include "support/env.h"

namespace {

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Value;

TEST(LiveRecoveryTest, WithoutTheLauncherTrainRunsOnceAndItsErrorsLeave) {
  kindling::testing::ScopedEnv no_live;
  no_live.set("KINDLING_LIVE_DIR", std::nullopt);
  EXPECT_FALSE(kd::live_recovery_enabled());
  EXPECT_FALSE(kd::new_round_announced());
  kh::LiveRecovery live(kh::LiveRecoveryOptions().backend("serial"));
  int calls = 0;
  EXPECT_THROW(live.run([&](kh::LiveRecovery&) {
    ++calls;
    throw kindling::CommunicationError("a peer was lost");
  }),
               kindling::CommunicationError);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(live.recoveries(), 0);
  kd::finalize();
}

TEST(LiveRecoveryTest, KeepCommitsAfterEveryIterationAndRestoresNothingOnTheFirstWorld) {
  kindling::testing::ScopedEnv no_live;
  no_live.set("KINDLING_LIVE_DIR", std::nullopt);
  kh::LiveRecovery live(kh::LiveRecoveryOptions().backend("serial"));
  torch::nn::Linear net(2, 1);
  const at::Tensor before = net->weight.detach().clone();
  std::vector<int> data(5, 0);
  live.run([&](kh::LiveRecovery& self) {
    Engine engine([](Engine&, const int&) -> Value { return 0.0; });
    self.keep({{"model", kh::stateful(net)}, {"engine", kh::stateful(engine)}}, engine);
    EXPECT_TRUE(at::equal(net->weight, before)) << "the first world has no commit to load";
    engine.run(data, 2);
  });
  EXPECT_EQ(live.committed_iteration(), 10);
  kd::finalize();
}

TEST(LiveRecoveryTest, RejoinWithoutTheLauncherIsRefused) {
  kindling::testing::ScopedEnv no_live;
  no_live.set("KINDLING_LIVE_DIR", std::nullopt);
  try {
    kd::rejoin("gloo", kd::InitOptions(), "a peer was lost", std::chrono::seconds(1));
    FAIL() << "rejoin() without --live_recovery returned";
  } catch (const kindling::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("was not started by `kindling-run --live_recovery`"), std::string::npos)
        << e.what();
  }
}

// The backends' traits say which cannot make a new world in the same process, and why (the
// reason LiveRecovery's refusal gives).
TEST(LiveRecoveryTest, BackendsSayWhetherTheyMakeANewWorld) {
  EXPECT_EQ(kd::why_no_new_world("gloo"), "");
  EXPECT_EQ(kd::why_no_new_world("nccl"), "");
  EXPECT_NE(kd::why_no_new_world("mpi").find("MPI is initialized once per process"), std::string::npos)
      << kd::why_no_new_world("mpi");
  EXPECT_EQ(kd::why_no_new_world("no-such-backend"), "");
}

TEST(LiveRecoveryTest, MpiUnderLiveRecoveryIsRefusedBeforeAnyWorld) {
  kindling::testing::ScopedEnv live_dir;
  live_dir.set("KINDLING_LIVE_DIR", "/nonexistent-live-dir");
  kh::LiveRecovery live(kh::LiveRecoveryOptions().backend("mpi"));
  int calls = 0;
  try {
    live.run([&](kh::LiveRecovery&) { ++calls; });
    FAIL() << "run() with backend mpi under live recovery returned";
  } catch (const kindling::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("backend 'mpi' cannot make a new world in the same process"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(kd::is_initialized());
}

TEST(LiveRecoveryTest, CheckEveryBelowOneIsRefused) {
  EXPECT_THROW(kh::LiveRecovery(kh::LiveRecoveryOptions().check_every(0)), kindling::UsageError);
  EXPECT_THROW(kh::LiveRecovery(kh::LiveRecoveryOptions().commit_every(0)), kindling::UsageError);
}

TEST(LiveRecoveryTest, CommitEveryCommitsEveryNthIteration) {
  kindling::testing::ScopedEnv no_live;
  no_live.set("KINDLING_LIVE_DIR", std::nullopt);
  kh::LiveRecovery live(kh::LiveRecoveryOptions().backend("serial").commit_every(4));
  std::vector<int> data(5, 0);
  std::vector<int64_t> seen;
  live.run([&](kh::LiveRecovery& self) {
    Engine engine([](Engine&, const int&) -> Value { return 0.0; });
    self.keep({{"engine", kh::stateful(engine)}}, engine);
    engine.on(kindling::engine::Events::ITERATION_COMPLETED,
              [&](Engine&) { seen.push_back(self.committed_iteration()); });
    engine.run(data, 2);  // iterations 1..10: commits at 4 and 8
  });
  EXPECT_EQ(seen, (std::vector<int64_t>{-1, -1, -1, 4, 4, 4, 4, 8, 8, 8}));
  kd::finalize();
}

}  // namespace
