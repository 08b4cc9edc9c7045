// DdpOptions::gradient_as_bucket_view: each parameter's gradient lives in its bucket, and the
// training it gives is bit for bit the training without it (the same arithmetic on the same
// values), with gradients zeroed in place or reset, with no_sync accumulation, a comm hook and
// unused parameters. Real processes on every distributed backend of the build.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/kindling.h>
#include <kindling/nn/ddp.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <string>

#include "support/backend_world_test.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

struct ViewNetImpl : torch::nn::Module {
  ViewNetImpl() {
    a = register_module("a", torch::nn::Linear(12, 32));
    b = register_module("b", torch::nn::Linear(32, 32));
    c = register_module("c", torch::nn::Linear(32, 4));
    side = register_module("side", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x, bool use_side) {
    auto h = torch::tanh(b(torch::tanh(a(x))));
    return use_side ? c(h) + side(h) : c(h);
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr}, side{nullptr};
};
TORCH_MODULE(ViewNet);

// How a run zeroes its gradients between steps, and what else it exercises.
struct Recipe {
  bool set_to_none = false;    // reset each .grad() (else zero it in place)
  bool optimizer_zero = false; // LibTorch's own Optimizer::zero_grad() (its default)
  bool accumulate = false;     // one no_sync backward before each synchronised one
  bool fp16_hook = false;
  bool unused = false;         // `side` used on rank 0 only (find_unused_parameters)
};

// Trains a fresh model for 4 steps and returns its parameters, concatenated.
torch::Tensor train(const Recipe& recipe, bool as_view) {
  const int rank = kd::get_rank();
  torch::manual_seed(77);
  auto options = kindling::nn::DdpOptions().bucket_cap_mb(0.002).gradient_as_bucket_view(as_view);
  if (recipe.fp16_hook) options.comm_hook(kindling::nn::fp16_compress_hook());
  if (recipe.unused) options.find_unused_parameters(true);
  auto model = kd::auto_model(ViewNet(), options);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const bool use_side = !recipe.unused || rank == 0;
  for (int step = 0; step < 4; ++step) {
    if (recipe.optimizer_zero) {
      opt.zero_grad();
    } else {
      for (auto& p : model->parameters()) {
        if (!p.grad().defined()) continue;
        if (recipe.set_to_none) p.mutable_grad().reset();
        else p.mutable_grad().zero_();
      }
    }
    torch::manual_seed(1000 + 10 * step + rank);
    if (recipe.accumulate) {
      auto guard = model.no_sync();
      torch::mse_loss(model(torch::randn({6, 12}), use_side), torch::randn({6, 4})).backward();
    }
    torch::mse_loss(model(torch::randn({6, 12}), use_side), torch::randn({6, 4})).backward();
    opt.step();
  }
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape({-1}).clone());
  return torch::cat(flat);
}

void initialize() {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
}

KINDLING_WORKER(ddp_bucket_view_trains_as_copies) {
  initialize();
  std::vector<std::pair<std::string, Recipe>> recipes;
  recipes.push_back({"zeroed in place", Recipe{}});
  recipes.push_back({"reset to none", Recipe{true}});
  recipes.push_back({"the optimizer's zero_grad", Recipe{false, true}});
  recipes.push_back({"no_sync accumulation", Recipe{false, false, true}});
  recipes.push_back({"fp16 hook", Recipe{false, false, false, true}});
  recipes.push_back({"unused parameters", Recipe{false, false, false, false, true}});
  recipes.push_back({"everything, reset to none", Recipe{true, false, true, true, true}});
  for (const auto& [name, recipe] : recipes) {
    const auto views = train(recipe, true);
    const auto copies = train(recipe, false);
    WCHECK(torch::equal(views, copies),
           << name << ": the weights differ, max " << (views - copies).abs().max().item<double>());
  }
  kd::finalize();
}

// With views, the gradients of one bucket share its storage; without, each has its own. When the
// model goes, its gradients are copied out of the buckets and keep their values.
KINDLING_WORKER(ddp_bucket_view_shares_the_bucket) {
  initialize();
  for (const bool as_view : {true, false}) {
    torch::manual_seed(5);
    std::vector<torch::Tensor> grads;
    std::vector<torch::Tensor> params;
    {
      auto model = kd::auto_model(ViewNet(), kindling::nn::DdpOptions().gradient_as_bucket_view(as_view));
      torch::mse_loss(model(torch::randn({3, 12}), true), torch::randn({3, 4})).backward();
      params = model->parameters();
      for (const auto& p : params) grads.push_back(p.grad().clone());
      // The model's 1.7 thousand floats fit the first bucket (1 MiB): a's weight and bias are in it.
      WCHECK(model.reducer()->buckets().size() == 1, << model.reducer()->buckets().size() << " buckets");
      const auto& wa = model->a->weight.grad();
      const auto& ba = model->a->bias.grad();
      WCHECK(wa.is_alias_of(ba) == as_view, << "as_view=" << as_view << ": a.weight's and a.bias's gradients "
                                             << (wa.is_alias_of(ba) ? "share" : "do not share") << " storage");
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      WCHECK(torch::equal(params[i].grad(), grads[i]), << "gradient " << i << " changed when the model went");
    }
    WCHECK(!params[0].grad().is_alias_of(params[1].grad()), << "gradients still share a bucket after the model went");
  }
  kd::finalize();
}

// A model still alive when finalize() runs (the usual end of a main()): its gradients, views of
// buckets that on the mpi backend live in MPI's shared window, keep their values after it.
KINDLING_WORKER(ddp_bucket_view_outlives_finalize) {
  initialize();
  torch::manual_seed(6);
  auto model = kd::auto_model(ViewNet());
  torch::mse_loss(model(torch::randn({3, 12}), true), torch::randn({3, 4})).backward();
  std::vector<torch::Tensor> before;
  for (const auto& p : model->parameters()) before.push_back(p.grad().clone());
  kd::finalize();
  const auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    WCHECK(torch::equal(params[i].grad(), before[i]), << "gradient " << i << " changed at finalize()");
  }
}

class DdpBucketViewTest : public kindling::testing::BackendWorldTest {};

TEST_P(DdpBucketViewTest, TrainsBitForBitAsCopies) { expect_ok("ddp_bucket_view_trains_as_copies"); }
TEST_P(DdpBucketViewTest, GradientsShareTheBucketAndOutliveTheModel) { expect_ok("ddp_bucket_view_shares_the_bucket"); }
TEST_P(DdpBucketViewTest, GradientsOutliveFinalize) { expect_ok("ddp_bucket_view_outlives_finalize"); }

INSTANTIATE_TEST_SUITE_P(Backends, DdpBucketViewTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

}  // namespace
