// OptimizerInBackward (kindling/nn/optimizer_in_backward.h): backward steps every parameter,
// and the training equals plain DDP with the ordinary optimizer (bit for bit on 2 ranks), with
// two parameter groups, an LR changed between steps, a wrapped fp16 hook, and a state saved and
// loaded; GradScaler refuses it; in one process it is the ordinary optimizer. Real processes on
// every CPU backend.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/engine/amp.h>
#include <kindling/error.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/optimizer_in_backward.h>
#include <kindling/nn/optimizer_state.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "support/backend_world_test.h"
#include "support/multiprocess.h"
#include "support/optimizers.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;

namespace optimizer_in_backward_test {

using Net = kindling::testing::Mlp3;

// Layer a at a tenth of the rate, the rest at the defaults.
std::vector<torch::optim::OptimizerParamGroup> groups_of(Net& net, const torch::optim::OptimizerOptions& o) {
  return kindling::testing::two_groups(net, o, 10);
}

std::unique_ptr<torch::optim::Optimizer> ordinary(Net& net, const torch::optim::OptimizerOptions& o) {
  return kindling::testing::ordinary_optimizer(o, groups_of(net, o));
}

torch::Tensor flat(Net& net) {
  std::vector<torch::Tensor> all;
  for (const auto& p : net->parameters()) all.push_back(p.detach().reshape({-1}).clone());
  return torch::cat(all);
}

// Steps [from, to) of a training; the LR of every group halves after step 2 (a scheduler's way).
void train(Net& net, torch::optim::Optimizer& opt, kn::DdpOptions options, int from, int to,
           kn::OptimizerInBackward* in_backward = nullptr) {
  auto model = kd::auto_model(net, options.bucket_cap_mb(0.002));
  for (int step = from; step < to; ++step) {
    if (step == 2)
      for (auto& g : opt.param_groups()) g.options().set_lr(g.options().get_lr() / 2);
    opt.zero_grad();
    torch::manual_seed(300 + 10 * step + kd::get_rank());
    torch::mse_loss(model(torch::randn({6, 12})), torch::randn({6, 4})).backward();
    if (in_backward && kd::get_world_size() > 1)
      WCHECK(in_backward->stepped_in_backward() == static_cast<int64_t>(net->parameters().size()),
             << "backward stepped " << in_backward->stepped_in_backward() << " parameters");
    opt.step();
  }
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  const double diff = (a - b).abs().max().item<double>();
  if (kd::get_world_size() <= 2) {
    WCHECK(torch::equal(a, b), << what << ": not bit for bit, max difference " << diff);
  } else {
    WCHECK(torch::allclose(a, b, 0, 1e-6), << what << ": max difference " << diff);
  }
}

void compare(const std::string& name, const torch::optim::OptimizerOptions& o, bool fp16) {
  auto reduce = [&] { return fp16 ? kn::fp16_compress_hook() : nullptr; };
  torch::manual_seed(21);
  Net plain_net;
  auto plain = ordinary(plain_net, o);
  train(plain_net, *plain, kn::DdpOptions().comm_hook(reduce()), 0, 4);
  torch::manual_seed(21);
  Net net;
  kn::OptimizerInBackward opt(groups_of(net, o), o);
  train(net, opt, kn::DdpOptions().comm_hook(opt.comm_hook(reduce())), 0, 2, &opt);
  // Saved and loaded into a fresh optimizer halfway (a checkpoint's way).
  const auto saved = opt.state_dict();
  kn::OptimizerInBackward resumed(groups_of(net, o), o);
  resumed.load_state_dict(saved);
  train(net, resumed, kn::DdpOptions().comm_hook(resumed.comm_hook(reduce())), 2, 4, &resumed);
  expect_close(flat(net), flat(plain_net), name + " weights");
  const auto ours = resumed.state_dict().at("state").toGenericDict();
  const auto theirs = kn::optimizer_state_dict(*plain).at("state").toGenericDict();
  WCHECK(ours.size() == theirs.size(), << name << ": " << ours.size() << " states, ordinary " << theirs.size());
  for (const auto& kv : theirs)
    for (const auto& e : kv.value().toGenericDict())
      if (e.value().isTensor())
        expect_close(ours.at(kv.key()).toGenericDict().at(e.key()).toTensor(), e.value().toTensor(),
                     name + " state " + e.key().toStringRef());
}

KINDLING_WORKER(optimizer_in_backward_trains_as_ddp) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  compare("sgd", torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3), false);
  compare("adam", torch::optim::AdamOptions(1e-2), false);
  compare("adamw", torch::optim::AdamWOptions(1e-2).weight_decay(0.1).amsgrad(true), false);
  compare("adam under the fp16 hook", torch::optim::AdamOptions(1e-2), true);
  kd::finalize();
}

KINDLING_WORKER(optimizer_in_backward_refuses_grad_scaler) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  Net net;
  kn::OptimizerInBackward opt(net->parameters(), torch::optim::SGDOptions(0.1));
  kindling::engine::GradScaler scaler;
  std::string message;
  try {
    scaler.unscale_(opt);
  } catch (const kindling::UsageError& e) {
    message = e.what();
  }
  WCHECK(message.find("steps inside backward") != std::string::npos, << message);
  kd::finalize();
}

class OptimizerInBackwardTest : public kindling::testing::BackendWorldTest {};
TEST_P(OptimizerInBackwardTest, TrainsAsDdpWithTheOrdinaryStep) { expect_ok("optimizer_in_backward_trains_as_ddp"); }
INSTANTIATE_TEST_SUITE_P(Backends, OptimizerInBackwardTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

TEST(OptimizerInBackward, SerialIsTheOrdinaryOptimizer) {
  const torch::optim::AdamOptions o(1e-2);
  torch::manual_seed(5);
  Net plain_net;
  auto plain = ordinary(plain_net, o);
  train(plain_net, *plain, kn::DdpOptions(), 0, 3);
  torch::manual_seed(5);
  Net net;
  kn::OptimizerInBackward opt(groups_of(net, o), o);
  train(net, opt, kn::DdpOptions().comm_hook(opt.comm_hook()), 0, 3);
  EXPECT_TRUE(torch::equal(flat(net), flat(plain_net)));
}

// Local checks: one backend, two ranks are enough.
TEST(OptimizerInBackward, GradScalerRefusesIt) {
  kindling::testing::LaunchOptions opts;
  auto results = kindling::testing::run_workers("optimizer_in_backward_refuses_grad_scaler", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
}

}  // namespace optimizer_in_backward_test
