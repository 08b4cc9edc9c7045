// kindling::nn::BatchNorm2d: the same numbers as torch::nn::BatchNorm2d when not
// synchronized; synchronized over real ranks (gloo and mpi, 2 and 3 ranks, unequal local
// batches) it gives what one process computes on the whole batch: outputs, input
// gradients, summed weight gradients and running statistics; auto_model's sync_batchnorm.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/kindling.h>
#include <kindling/nn/batchnorm.h>
#include <kindling/nn/ddp.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include "support/models.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace knn = kindling::nn;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

TEST(BatchNorm2d, SameAsTorchBatchNorm2dTrainAndEval) {
  for (auto momentum : {c10::optional<double>(0.1), c10::optional<double>()}) {
    auto opts = torch::nn::BatchNormOptions(3).momentum(momentum);
    knn::BatchNorm2d ours(opts);
    torch::nn::BatchNorm2d theirs(opts);
    torch::manual_seed(3);
    ours->weight.data().uniform_();
    theirs->weight.data().copy_(ours->weight);
    for (int step = 0; step < 3; ++step) {
      auto x = torch::randn({4, 3, 5, 5}) * 3 + 1;
      auto a = x.clone().requires_grad_(), b = x.clone().requires_grad_();
      auto ya = ours(a), yb = theirs(b);
      EXPECT_TRUE(torch::allclose(ya, yb, 1e-5, 1e-6));
      (ya * ya).sum().backward();
      (yb * yb).sum().backward();
      EXPECT_TRUE(torch::allclose(a.grad(), b.grad(), 1e-4, 1e-5));
      EXPECT_TRUE(torch::allclose(ours->weight.grad(), theirs->weight.grad(), 1e-4, 1e-5));
    }
    EXPECT_TRUE(torch::allclose(ours->running_mean, theirs->running_mean));
    EXPECT_TRUE(torch::allclose(ours->running_var, theirs->running_var));
    EXPECT_EQ(ours->num_batches_tracked.item<int64_t>(), 3);
    ours->eval();
    theirs->eval();
    auto x = torch::randn({2, 3, 4, 4});
    EXPECT_TRUE(torch::allclose(ours(x), theirs(x), 1e-5, 1e-6));
  }
  // The same state-dict names.
  std::vector<std::string> a, b;
  knn::BatchNorm2d ours(3);
  torch::nn::BatchNorm2d theirs(3);
  for (const auto& p : ours->named_parameters()) a.push_back(p.key());
  for (const auto& p : ours->named_buffers()) a.push_back(p.key());
  for (const auto& p : theirs->named_parameters()) b.push_back(p.key());
  for (const auto& p : theirs->named_buffers()) b.push_back(p.key());
  EXPECT_EQ(a, b);
  EXPECT_EQ(ours->num_batches_tracked.sizes(), theirs->num_batches_tracked.sizes());
}

TEST(BatchNorm2d, ConvertRefusesTorchBatchNormByName) {
  torch::nn::Sequential model(torch::nn::Conv2d(3, 4, 3), knn::BatchNorm2d(4), torch::nn::BatchNorm2d(4));
  try {
    knn::convert_sync_batchnorm(*model);
    ADD_FAILURE() << "accepted torch::nn::BatchNorm2d";
  } catch (const kindling::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("1 torch::nn::BatchNorm layer(s) cannot be synchronized: 2."), std::string::npos) << what;
    EXPECT_NE(what.find("kindling::nn::BatchNorm2d"), std::string::npos) << what;
  }
  torch::nn::Sequential ok(torch::nn::Conv2d(3, 4, 3), knn::BatchNorm2d(4), knn::BatchNorm2d(4));
  EXPECT_EQ(knn::convert_sync_batchnorm(*ok), 2);
  // Serial: synchronized layers behave as plain ones.
  auto x = torch::randn({2, 3, 6, 6});
  torch::nn::Sequential plain(torch::nn::Conv2d(3, 4, 3), knn::BatchNorm2d(4), knn::BatchNorm2d(4));
  torch::manual_seed(0);
  auto y1 = ok->forward(x);
  EXPECT_EQ(y1.sizes(), (std::vector<int64_t>{2, 4, 4, 4}));
}

// Rank r holds r + 2 samples of a global batch every rank can rebuild.
int64_t offset_of(int rank) {
  int64_t o = 0;
  for (int r = 0; r < rank; ++r) o += r + 2;
  return o;
}

using Net = kindling::testing::ConvBn;

KINDLING_WORKER(sync_batchnorm_matches_full_batch) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int rank = kd::get_rank(), world = kd::get_world_size();
  const int64_t total = offset_of(world), mine = rank + 2, offset = offset_of(rank);
  torch::manual_seed(5);
  auto reference = std::make_shared<Net>();
  torch::manual_seed(5);
  auto local = std::make_shared<Net>();
  auto model = kd::auto_model(local, knn::DdpOptions().sync_batchnorm(true));
  WCHECK(model->bn->sync());
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(100 + step);
    auto x = torch::randn({total, 3, 5, 5}) * 2 + 0.5;
    auto w = torch::randn({total, 4, 3, 3});
    auto x_ref = x.clone().requires_grad_();
    auto x_mine = x.narrow(0, offset, mine).clone().requires_grad_();
    for (auto& p : reference->parameters()) p.mutable_grad() = torch::Tensor();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    auto y_ref = reference->forward(x_ref);
    auto y = model(x_mine);
    WCHECK(
        torch::allclose(y, y_ref.narrow(0, offset, mine), 1e-4, 1e-5),
        << "step " << step << " output differs by " << (y - y_ref.narrow(0, offset, mine)).abs().max().item<double>());
    (y_ref * w).sum().backward();
    (y * w.narrow(0, offset, mine)).sum().backward();
    WCHECK(torch::allclose(x_mine.grad(), x_ref.grad().narrow(0, offset, mine), 1e-4, 1e-5),
           << "input gradient differs by "
           << (x_mine.grad() - x_ref.grad().narrow(0, offset, mine)).abs().max().item<double>());
    // DDP averages the local weight gradients: times the world size they are the full batch's.
    for (const auto& item : model->named_parameters()) {
      auto g = item.value().grad() * world;
      auto r = reference->named_parameters()[item.key()].grad();
      WCHECK(torch::allclose(g, r, 1e-3, 1e-4),
             << item.key() << " gradient differs by " << (g - r).abs().max().item<double>());
    }
  }
  WCHECK(torch::allclose(model->bn->running_mean, reference->bn->running_mean, 1e-5, 1e-6));
  WCHECK(torch::allclose(model->bn->running_var, reference->bn->running_var, 1e-4, 1e-5),
         << (model->bn->running_var - reference->bn->running_var).abs().max().item<double>());
  // Evaluation uses the running statistics, without communication.
  model->eval();
  reference->eval();
  auto x = torch::randn({2, 3, 5, 5});
  WCHECK(torch::allclose(model(x), reference->forward(x), 1e-5, 1e-6));
  kd::finalize();
}

class SyncBatchNormTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(SyncBatchNormTest, MatchesOneProcessOnTheWholeBatch) {
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  opts.deadline = std::chrono::seconds(120);
  auto results = run_workers("sync_batchnorm_matches_full_batch", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

INSTANTIATE_TEST_SUITE_P(Backends, SyncBatchNormTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

}  // namespace
