// What DDP learns from its first synchronised backward: the buckets made again in the order the
// gradients become ready, and DdpOptions::static_graph (unused parameters learnt once, a graph
// that changes refused). Real processes on every distributed backend of the build.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/kindling.h>
#include <kindling/nn/ddp.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <string>

#include "support/backend_world_test.h"
#include "support/errors.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;

namespace {

// Registered head first, stem last, but used stem -> body -> head: backward's order of readiness
// (head, body, stem) is the registration order, not its reverse.
struct ShuffledImpl : torch::nn::Module {
  ShuffledImpl() {
    head = register_module("head", torch::nn::Linear(16, 3));
    body = register_module("body", torch::nn::Linear(16, 16));
    stem = register_module("stem", torch::nn::Linear(6, 16));
    spare = register_module("spare", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(torch::Tensor x, bool use_spare = false) {
    auto h = torch::tanh(body(torch::tanh(stem(x))));
    return use_spare ? head(h) + spare(h) : head(h);
  }
  torch::nn::Linear head{nullptr}, body{nullptr}, stem{nullptr}, spare{nullptr};
};
TORCH_MODULE(Shuffled);

void start() {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
}

// One step's batch of rank r, and the whole batch (every rank's rows) for the one-process reference.
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank) {
  torch::manual_seed(500 + 10 * step + rank);
  return {torch::randn({4, 6}), torch::randn({4, 3})};
}

KINDLING_WORKER(ddp_rebuilds_buckets_in_ready_order) {
  start();
  const int rank = kd::get_rank(), world = kd::get_world_size();
  torch::manual_seed(9);
  // A tiny cap: about one parameter a bucket, so the order shows in the buckets.
  auto model = kd::auto_model(Shuffled(), kindling::nn::DdpOptions().bucket_cap_mb(0.0001));
  torch::manual_seed(9);
  Shuffled reference;
  const auto before = model.reducer()->buckets();
  WCHECK(before.back().back().rfind("head.", 0) == 0, << "last bucket before: " << before.back().back());
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    ref_opt.zero_grad();
    auto [x, y] = batch(step, rank);
    torch::mse_loss(model(x, true), y).backward();
    for (int r = 0; r < world; ++r) {
      auto [xr, yr] = batch(step, r);
      (torch::mse_loss(reference(xr, true), yr) / world).backward();
    }
    auto mine = model->named_parameters();
    for (const auto& item : reference->named_parameters()) {
      const auto& g = mine[item.key()].grad();
      WCHECK(g.defined() && torch::allclose(g, item.value().grad(), 1e-5, 1e-6),
             << "step " << step << ": gradient of " << item.key());
    }
    opt.step();
    ref_opt.step();
  }
  // Backward reaches stem's gradients last: its bucket is now the last one.
  const auto after = model.reducer()->buckets();
  WCHECK(after.back().back().rfind("stem.", 0) == 0, << "last bucket after: " << after.back().back());
  kd::finalize();
}

// The model never uses `spare`, which is an error without find_unused_parameters, and fine with
// static_graph; then a backward that does use it is refused on every rank, by name.
KINDLING_WORKER(ddp_static_graph) {
  start();
  const int rank = kd::get_rank();
  torch::manual_seed(9);
  auto stat = kd::auto_model(Shuffled(), kindling::nn::DdpOptions().static_graph(true));
  torch::manual_seed(9);
  auto found = kd::auto_model(Shuffled(), kindling::nn::DdpOptions().find_unused_parameters(true));
  torch::optim::SGD a(stat->parameters(), 0.1), b(found->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    a.zero_grad();
    b.zero_grad();
    auto [x, y] = batch(step, rank);
    torch::mse_loss(stat(x), y).backward();
    torch::mse_loss(found(x), y).backward();
    a.step();
    b.step();
  }
  auto q = found->named_parameters();
  for (const auto& item : stat->named_parameters()) {
    // The same sums; only the buckets differ (rebuilt here, not there), and with them the
    // all-reduce's order of additions at 3 ranks.
    WCHECK(torch::allclose(item.value(), q[item.key()], 1e-6, 1e-7),
           << item.key() << " differs from find_unused_parameters' run");
  }
  WCHECK(!stat->spare->weight.grad().defined(), << "spare, unused everywhere, got a gradient");
  auto [x, y] = batch(9, rank);
  const std::string refused = kindling::testing::error_of([&] { torch::mse_loss(stat(x, true), y).backward(); });
  WCHECK(refused.find("static_graph: this backward's graph is not the first backward's: parameter 'spare.") !=
             std::string::npos,
         << refused);
  kd::finalize();
}

// Under a communication hook the buckets stay as made (a hook may keep state by bucket).
KINDLING_WORKER(ddp_hook_keeps_buckets) {
  start();
  torch::manual_seed(9);
  auto model = kd::auto_model(
      Shuffled(), kindling::nn::DdpOptions().bucket_cap_mb(0.0001).comm_hook(kindling::nn::fp16_compress_hook()));
  const auto before = model.reducer()->buckets();
  auto [x, y] = batch(0, kd::get_rank());
  torch::mse_loss(model(x, true), y).backward();
  WCHECK(model.reducer()->buckets() == before, << "the buckets changed under a hook");
  kd::finalize();
}

class DdpRebuildTest : public kindling::testing::BackendWorldTest {};

TEST_P(DdpRebuildTest, BucketsFollowTheOrderOfReadiness) { expect_ok("ddp_rebuilds_buckets_in_ready_order"); }
TEST_P(DdpRebuildTest, StaticGraphLearnsUnusedParametersAndRefusesAChange) { expect_ok("ddp_static_graph"); }
TEST_P(DdpRebuildTest, AHookKeepsTheBuckets) { expect_ok("ddp_hook_keeps_buckets"); }

INSTANTIATE_TEST_SUITE_P(Backends, DdpRebuildTest, ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

}  // namespace
