// kindling::dist::check_replicas: the fingerprint sees one flipped bit in every dtype; real ranks
// training a DDP model stay equal over many checks; a bit flipped on one rank at a known step
// is named at the next check, by every rank with the same message (3 ranks: that rank, by the
// majority; 2 ranks: both, no majority).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "kindling/dist/auto.h"
#include "kindling/dist/dist.h"
#include "kindling/dist/replica_check.h"
#include "support/multiprocess.h"

namespace {

namespace kd = kindling::dist;

// Flips bit `bit` of the 32-bit word `word` of `t`'s bytes, in place.
void flip_bit(const at::Tensor& t, int64_t word, int bit) {
  at::NoGradGuard no_grad;
  at::Tensor words = t.detach().view({-1}).view(at::kInt);
  words[word].bitwise_xor_(1 << bit);
}

TEST(ReplicaCheckTest, OneFlippedBitChangesTheFingerprintInEveryDtype) {
  at::manual_seed(3);
  const std::vector<at::ScalarType> types{at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kByte};
  for (const at::ScalarType type : types) {
    const at::Tensor a = (at::randn({6, 5}) * 100).to(type);
    const at::Tensor base = kd::replica_fingerprints({a});
    ASSERT_EQ(base.scalar_type(), at::kLong);
    ASSERT_EQ(base.numel(), 1);
    EXPECT_TRUE(at::equal(base, kd::replica_fingerprints({a.clone()}))) << type;
    // Every bit of every byte: one flip always changes the sum.
    const at::Tensor bytes = a.view({-1}).view(at::kByte);
    for (int64_t byte = 0; byte < bytes.numel(); byte += 7) {
      for (int bit = 0; bit < 8; ++bit) {
        at::Tensor b = a.clone();
        b.view({-1}).view(at::kByte)[byte].bitwise_xor_(1 << bit);
        EXPECT_FALSE(at::equal(base, kd::replica_fingerprints({b}))) << type << " byte " << byte << " bit " << bit;
      }
    }
  }
  // A transposed (non-contiguous) tensor is read in its own order: its contiguous copy's sum.
  const at::Tensor m = at::randn({4, 3});
  EXPECT_TRUE(at::equal(kd::replica_fingerprints({m.t()}), kd::replica_fingerprints({m.t().contiguous()})));
  const at::Tensor flags = at::rand({9}) > 0.5;
  EXPECT_EQ(kd::replica_fingerprints({flags, at::empty({0})}).numel(), 2);
  EXPECT_EQ(kd::replica_fingerprints({at::empty({0})}).item<int64_t>(), 0);
  EXPECT_EQ(kd::replica_fingerprints({}).numel(), 0);
}

TEST(ReplicaCheckTest, TheSerialModelComparesNothing) {
  torch::nn::Linear net(3, 2);
  EXPECT_NO_THROW(kd::check_replicas(*net));
}

// A DDP model (two linear layers, SGD with momentum) trained for KINDLING_TEST_STEPS steps, each
// rank on its own batches, the replicas checked every 5 steps. With KINDLING_TEST_FLIP_RANK = r,
// rank r flips a high mantissa bit of one weight of layer "2" after step 23: the check at step
// 25 throws on every rank, which prints "DIVERGED <ranks>|<message without the rank prefix>".
KINDLING_WORKER(replica_check_training) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  at::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(16, 1));
  auto model = kd::auto_model(net.ptr());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const int steps = std::atoi(std::getenv("KINDLING_TEST_STEPS"));
  const int flip_rank = std::atoi(std::getenv("KINDLING_TEST_FLIP_RANK"));
  int checks = 0;
  for (int step = 1; step <= steps; ++step) {
    at::manual_seed(1000 * step + kd::get_rank());
    const at::Tensor x = at::randn({16, 8}), y = x.sum(1, true);
    optimizer.zero_grad();
    torch::nn::functional::mse_loss(model(x), y).backward();
    optimizer.step();
    if (step == 23 && kd::get_rank() == flip_rank) flip_bit(net->named_parameters()["2.weight"], 5, 22);
    if (step % 5 != 0) continue;
    try {
      kd::check_replicas(*net, kd::ReplicaCheckOptions().context("at step " + std::to_string(step)));
      ++checks;
    } catch (const kd::ReplicaDivergedError& e) {
      std::string ranks;
      for (const int r : e.diverged_ranks()) ranks += std::to_string(r) + ",";
      const std::string what = e.what();
      std::printf("DIVERGED %s|%s\n", ranks.c_str(), what.substr(what.find("] ") + 2).c_str());
      std::fflush(stdout);
      WCHECK(e.differing() == std::vector<std::string>{"2.weight"});
      WCHECK(e.diverged(flip_rank));
      kd::finalize();
      return;
    }
  }
  std::printf("EQUAL after %d checks\n", checks);
  std::fflush(stdout);
  kd::finalize();
}

std::vector<kindling::testing::RankResult> train(const std::string& backend, int ranks, int steps, int flip_rank) {
  kindling::testing::LaunchOptions o;
  o.backend = backend;
  o.world_size = ranks;
  o.env = {{"KINDLING_TEST_STEPS", std::to_string(steps)}, {"KINDLING_TEST_FLIP_RANK", std::to_string(flip_rank)}};
  return kindling::testing::run_workers("replica_check_training", o);
}

TEST(ReplicaCheckTest, ReplicasTrainedByDdpStayEqualOverManyChecks) {
  for (const auto& [backend, ranks] : kindling::testing::cpu_backend_world_sizes({2, 3})) {
    const auto results = train(backend, ranks, 200, -1);
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << backend << "\n" << kindling::testing::describe(results);
      EXPECT_NE(r.out.find("EQUAL after 40 checks"), std::string::npos) << backend << " rank " << r.rank << r.out;
    }
  }
}

// What every rank printed after "DIVERGED ": one line, the same on every rank.
std::string the_verdict(const std::vector<kindling::testing::RankResult>& results) {
  std::set<std::string> lines;
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
    const auto at = r.out.find("DIVERGED ");
    EXPECT_NE(at, std::string::npos) << "rank " << r.rank << ": " << r.out;
    if (at != std::string::npos) lines.insert(r.out.substr(at + 9, r.out.find('\n', at) - at - 9));
  }
  EXPECT_EQ(lines.size(), 1u) << "the ranks' messages differ:\n" << kindling::testing::describe(results);
  return lines.empty() ? std::string() : *lines.begin();
}

TEST(ReplicaCheckTest, ThreeRanksNameTheFlippedRankByTheMajority) {
  for (const auto& [backend, ranks] : kindling::testing::cpu_backend_world_sizes({3})) {
    const std::string verdict = the_verdict(train(backend, ranks, 40, 1));
    EXPECT_EQ(verdict.rfind("1,|kindling::dist::check_replicas: the data-parallel replicas differ at step 25: "
                            "rank 1 diverged from the majority (ranks 0, 2 of 3); rank 1 differs in 1 of 4 tensors: "
                            "'2.weight' (fingerprint ",
                            0),
              0u)
        << backend << ": " << verdict;
    EXPECT_NE(verdict.find("Stop trusting the host of rank 1: resume from the last checkpoint without it, or train "
                           "under kindling-run --live_recovery"),
              std::string::npos)
        << verdict;
  }
}

TEST(ReplicaCheckTest, TwoRanksThatDisagreeAreBothNamed) {
  for (const auto& [backend, ranks] : kindling::testing::cpu_backend_world_sizes({2})) {
    const std::string verdict = the_verdict(train(backend, ranks, 40, 0));
    EXPECT_EQ(verdict.rfind("0,1,|kindling::dist::check_replicas: the data-parallel replicas differ at step 25: no "
                            "replica is held by a majority of the 2 ranks, so which is right cannot be told; 1 of 4 "
                            "tensors differ: '2.weight' (the first's fingerprints: rank ",
                            0),
              0u)
        << backend << ": " << verdict;
    EXPECT_NE(verdict.find("every rank is named: ranks 0, 1). "), std::string::npos) << verdict;
    EXPECT_NE(verdict.find("The job stops: resume from the last checkpoint, on 3 ranks or more"), std::string::npos)
        << verdict;
  }
}

}  // namespace
