// kh::ReplicaCheck on a supervised trainer: real ranks (gloo) train a DDP model; a bit flipped on
// one rank at iteration 23 stops the run at the check of iteration 30 on every rank, the message
// naming the rank, the parameter and the iterations between which it happened. Its misuse, and
// LiveRecovery without the launcher letting the error leave run().
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kindling/dist/auto.h"
#include "kindling/dist/dist.h"
#include "kindling/dist/live.h"
#include "kindling/engine/supervised.h"
#include "kindling/handlers/checkpointing/live_recovery.h"
#include "kindling/handlers/replica_check.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/multiprocess.h"

namespace {

namespace kd = kindling::dist;
namespace ke = kindling::engine;
namespace kh = kindling::handlers;
using kindling::UsageError;
using kindling::testing::error_of;

// 64 batches of 8 samples (4 features), the same on every rank (DDP's gradients differ anyway by
// the ranks' own batch: each rank takes its own slice).
std::vector<kindling::data::Example> batches(int rank) {
  at::manual_seed(7 + rank);
  std::vector<kindling::data::Example> out;
  for (int b = 0; b < 64; ++b) {
    const at::Tensor x = at::randn({8, 4});
    out.push_back({x, x.sum(1, true)});
  }
  return out;
}

// The trainer with a ReplicaCheck every 10 iterations; rank KINDLING_TEST_FLIP_RANK flips a high
// mantissa bit of the weight after iteration 23. Every rank prints "STOPPED <iteration>|<message
// after the rank prefix>", or "COMPLETED <checks>".
KINDLING_WORKER(replica_check_trainer) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  at::manual_seed(0);
  torch::nn::Linear net(4, 1);
  auto model = kd::auto_model(net);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  auto trainer = ke::create_supervised_trainer(
      model, optimizer, [](const at::Tensor& y_pred, const at::Tensor& y) { return at::mse_loss(y_pred, y); });
  const int flip_rank = std::atoi(std::getenv("KINDLING_TEST_FLIP_RANK"));
  trainer.on(ke::Events::ITERATION_COMPLETED, [&](ke::Engine& e) {
    if (e.state().iteration != 23 || kd::get_rank() != flip_rank) return;
    at::NoGradGuard no_grad;
    net->weight.view({-1}).view(at::kInt)[2].bitwise_xor_(1 << 22);
  });
  auto check = std::make_shared<kh::ReplicaCheck>(net.ptr());
  check->attach(trainer, 10);
  try {
    trainer.run(batches(kd::get_rank()), 1);
    std::printf("COMPLETED %lld\n", static_cast<long long>(check->checks()));
  } catch (const kd::ReplicaDivergedError& e) {
    const std::string what = e.what();
    std::printf("STOPPED %lld|%s\n", static_cast<long long>(trainer.state().iteration),
                what.substr(what.find("] ") + 2).c_str());
  }
  std::fflush(stdout);
  kd::finalize();
}

// Each rank's line after `tag`, checked to be the same on every rank.
std::string same_line(const std::vector<kindling::testing::RankResult>& results, const std::string& tag) {
  std::set<std::string> lines;
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
    const auto at = r.out.find(tag);
    EXPECT_NE(at, std::string::npos) << "rank " << r.rank << ": " << r.out;
    if (at != std::string::npos) lines.insert(r.out.substr(at + tag.size(), r.out.find('\n', at) - at - tag.size()));
  }
  EXPECT_EQ(lines.size(), 1u) << kindling::testing::describe(results);
  return lines.empty() ? std::string() : *lines.begin();
}

std::vector<kindling::testing::RankResult> run_trainer(int ranks, int flip_rank) {
  kindling::testing::LaunchOptions o;
  o.world_size = ranks;
  o.env = {{"KINDLING_TEST_FLIP_RANK", std::to_string(flip_rank)}};
  return kindling::testing::run_workers("replica_check_trainer", o);
}

TEST(ReplicaCheckHandlerTest, EqualReplicasTrainToTheEnd) {
  EXPECT_EQ(same_line(run_trainer(3, -1), "COMPLETED "), "6");  // iterations 10, 20, ..., 60
}

TEST(ReplicaCheckHandlerTest, AFlippedBitStopsEveryRankAtTheNextCheckNamingTheRank) {
  const std::string line = same_line(run_trainer(3, 2), "STOPPED ");
  EXPECT_EQ(line.rfind("30|kindling::dist::check_replicas: the data-parallel replicas differ at iteration 30 of "
                       "trainer (they were equal at iteration 20, the last check): rank 2 diverged from the majority "
                       "(ranks 0, 1 of 3); rank 2 differs in 1 of 2 tensors: 'weight' (fingerprint ",
                       0),
            0u)
      << line;
}

TEST(ReplicaCheckHandlerTest, TwoRanksThatDisagreeStopNamingBoth) {
  const std::string line = same_line(run_trainer(2, 1), "STOPPED ");
  EXPECT_EQ(line.rfind("30|kindling::dist::check_replicas: the data-parallel replicas differ at iteration 30 of "
                       "trainer (they were equal at iteration 20, the last check): no replica is held by a majority "
                       "of the 2 ranks",
                       0),
            0u)
      << line;
  EXPECT_NE(line.find("every rank is named: ranks 0, 1)"), std::string::npos) << line;
}

TEST(ReplicaCheckHandlerTest, MisuseIsRefusedWithTheFix) {
  EXPECT_NE(error_of<UsageError>([] { kh::ReplicaCheck(nullptr); }).find("the module is null; pass the module"),
            std::string::npos);
  torch::nn::Linear net(2, 1);
  ke::Engine trainer([](ke::Engine&, const int&) -> ke::Value { return 0.0; });
  auto check = std::make_shared<kh::ReplicaCheck>(net.ptr());
  EXPECT_NE(error_of<UsageError>([&] {
              check->attach(trainer, 0);
            }).find("ReplicaCheck.attach: every should be >= 1 iteration, got 0; the default is 100"),
            std::string::npos);
  kh::ReplicaCheck on_stack(net.ptr());
  EXPECT_NE(error_of<UsageError>([&] { on_stack.attach(trainer); }).find("std::make_shared"), std::string::npos);
  // The serial model: every check passes.
  check->attach(trainer, 2);
  trainer.run(std::vector<int>(7, 0), 1);
  EXPECT_EQ(check->checks(), 3);
  EXPECT_EQ(check->last_equal_iteration(), 6);
}

// Without kindling-run --live_recovery a diverged replica is an error like any other: it leaves
// LiveRecovery::run, and leave_job() is refused.
TEST(ReplicaCheckHandlerTest, WithoutTheLauncherLiveRecoveryLetsTheErrorLeave) {
  kindling::testing::ScopedEnv no_live;
  no_live.set("KINDLING_LIVE_DIR", std::nullopt);
  kh::LiveRecovery live(kh::LiveRecoveryOptions().backend("serial"));
  EXPECT_THROW(live.run([](kh::LiveRecovery&) {
    throw kd::ReplicaDivergedError("diverged", {1}, {0, 2}, {"w"});
  }),
               kd::ReplicaDivergedError);
  EXPECT_EQ(live.recoveries(), 0);
  EXPECT_NE(error_of<UsageError>([] {
              kd::leave_job("rank 1 diverged");
            }).find("kindling::dist::leave_job: this process was not started by `kindling-run --live_recovery`"),
            std::string::npos);
  kd::finalize();
}

}  // namespace
