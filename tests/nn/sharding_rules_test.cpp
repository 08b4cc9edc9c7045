// A sharded model's rules (kindling/nn/sharding.h): every misuse is refused with the fix, on every
// rank, without a hang: weights changed outside the model, an optimizer on the module's
// parameters, ranks whose models differ, nested units, tied weights, a unit left out of the loss,
// an optimizer stepping inside backward that needs a closure, clipping while it steps there; a
// unit called twice trains as DDP, stepping inside backward trains as stepping after it (also
// with no_sync); the module outlives its sharded model; GradScaler decides over every rank. Real processes; the serial model is a pass-through.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/engine/amp.h>
#include <kindling/engine/supervised.h>
#include <kindling/error.h>
#include <kindling/nn/sharding.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/backend_world_test.h"
#include "support/multiprocess.h"
#include "support/sharded_models.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;
using kindling::testing::Block;
using kindling::testing::BlockImpl;
using kindling::testing::UnitNet;

namespace sharding_rules_test {

void initialize() {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
}

// `body` must throw kindling::UsageError whose message holds every one of `parts`.
void expect_refused(const std::string& what, const std::function<void()>& body, const std::vector<std::string>& parts) {
  std::string message;
  try {
    body();
  } catch (const kindling::UsageError& e) {
    message = e.what();
  }
  WCHECK(!message.empty(), << what << ": not refused");
  for (const auto& part : parts) WCHECK(message.find(part) != std::string::npos, << what << ": " << message);
}

// A unit that computes twice in one forward.
struct TwiceImpl : torch::nn::Module {
  TwiceImpl() { b = register_module("b", kn::Unit<BlockImpl>(Block(12, 12))); }
  torch::Tensor forward(torch::Tensor x) { return b(b(x)); }
  kn::Unit<BlockImpl> b{nullptr};
};
TORCH_MODULE(Twice);

// A Unit inside a Unit.
struct NestedImpl : torch::nn::Module {
  NestedImpl() {
    inner = register_module("inner", kn::Unit<BlockImpl>(Block(12, 12)));
    fc = register_module("fc", torch::nn::Linear(12, 12));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(inner(x)); }
  kn::Unit<BlockImpl> inner{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Nested);

struct OuterImpl : torch::nn::Module {
  OuterImpl() { outer = register_module("outer", kn::Unit<NestedImpl>(Nested())); }
  torch::Tensor forward(torch::Tensor x) { return outer(x); }
  kn::Unit<NestedImpl> outer{nullptr};
};
TORCH_MODULE(Outer);

// One weight under two names: "w" and "c.w".
struct HoldsImpl : torch::nn::Module {
  explicit HoldsImpl(torch::Tensor t) { w = register_parameter("w", t); }
  torch::Tensor w;
};
TORCH_MODULE(Holds);

struct TiedImpl : torch::nn::Module {
  TiedImpl() {
    w = register_parameter("w", torch::randn({12, 12}));
    c = register_module("c", Holds(w));
  }
  torch::Tensor forward(torch::Tensor x) { return x.mm(w).mm(c->w); }
  torch::Tensor w;
  Holds c{nullptr};
};
TORCH_MODULE(Tied);

// A unit whose output the loss does not use.
struct UnusedImpl : torch::nn::Module {
  UnusedImpl() {
    used = register_module("used", kn::Unit<BlockImpl>(Block(12, 4)));
    unused = register_module("unused", kn::Unit<BlockImpl>(Block(12, 4)));
  }
  torch::Tensor forward(torch::Tensor x) {
    unused(x);
    return used(x);
  }
  kn::Unit<BlockImpl> used{nullptr}, unused{nullptr};
};
TORCH_MODULE(Unused);

// A unit called twice in one forward is gathered again for its second call, and autograd adds
// the two calls' gradients before accumulating them: it trains as DDP (bit for bit on 2 ranks).
void twice_trains_as_ddp(const kn::ShardingOptions& options, const std::string& mode) {
  torch::manual_seed(3);
  Twice plain_net;
  auto plain = kd::auto_model(plain_net);
  torch::optim::SGD plain_optimizer(plain_net->parameters(), 0.1);
  torch::manual_seed(3);
  Twice net;
  auto model = kd::auto_model(net, options);
  torch::optim::SGD optimizer(model.parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    auto x = kindling::testing::sharding_batch(step).first;
    plain_optimizer.zero_grad();
    optimizer.zero_grad();
    torch::mse_loss(plain(x), x).backward();
    torch::mse_loss(model(x), x).backward();
    plain_optimizer.step();
    optimizer.step();
  }
  const auto whole = model.sharded()->full_parameters();
  const auto reference = plain_net->parameters();
  for (std::size_t i = 0; i < whole.size(); ++i)
    WCHECK(torch::equal(whole[i].second, reference[i].detach()), << mode << "a unit called twice: " << whole[i].first
                                                                 << " differs from DDP's");
}

// The optimizer inside backward: with no_sync on every other micro-batch and Adam, the weights
// equal those of the same sharded model stepped after backward (bit for bit); the shards hold no
// gradient once stepped; LBFGS (which needs a closure) and clipping while it is on are refused.
void stepping_in_backward(const kn::ShardingOptions& options, const std::string& mode) {
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> weights;
  for (bool stepping : {false, true}) {
    torch::manual_seed(4);
    UnitNet net;
    auto model = kd::auto_model(net, options);
    torch::optim::Adam optimizer(model.parameters(), torch::optim::AdamOptions(0.01));
    if (stepping) model.step_in_backward(optimizer);
    for (int step = 0; step < 6; ++step) {
      auto [x, y] = kindling::testing::sharding_batch(step);
      if (step % 2 == 0) {
        auto guard = model.no_sync();
        torch::mse_loss(model(x), y).backward();
        continue;
      }
      torch::mse_loss(model(x), y).backward();
      if (stepping)
        for (const auto& p : model.parameters())
          WCHECK(!p.grad().defined(), << mode << "a shard still has its gradient after stepping inside backward");
      optimizer.step();
      optimizer.zero_grad();
    }
    weights.push_back(model.sharded()->full_parameters());
    if (!stepping) continue;
    expect_refused(mode + "clipping while stepping inside backward", [&] { model.clip_grad_norm(1.0); },
                   {"step_in_backward(nullptr)"});
    torch::optim::LBFGS lbfgs(model.parameters());
    expect_refused(mode + "LBFGS inside backward", [&] { model.step_in_backward(lbfgs); }, {"closure", "LBFGS"});
    model.sharded()->step_in_backward(nullptr);
    model.clip_grad_norm(1.0);
  }
  for (std::size_t i = 0; i < weights[0].size(); ++i)
    WCHECK(torch::equal(weights[0][i].second, weights[1][i].second),
           << mode << "stepping inside backward: " << weights[0][i].first << " differs from stepping after it");
}

KINDLING_WORKER(sharding_refuses_misuse) {
  initialize();
  auto [x, y] = kindling::testing::sharding_batch(0);
  for (bool reshard : {true, false}) {
    const std::string mode = reshard ? "ZeRO-3: " : "ZeRO-2: ";
    const auto options = kn::ShardingOptions().reshard_after_forward(reshard);
    twice_trains_as_ddp(options, mode);
    stepping_in_backward(options, mode);
    auto unused = kd::auto_model(Unused(), options);
    expect_refused(mode + "a unit out of the loss", [&] { torch::mse_loss(unused(x), y).backward(); },
                   {"got no gradient", "unused.fc.weight", "unused.fc.bias"});
    UnitNet net;
    auto model = kd::auto_model(net, options);
    torch::optim::SGD on_the_module(net->parameters(), 0.1);
    expect_refused(mode + "an optimizer on the module's parameters", [&] { model.check_optimizer(on_the_module); },
                   {"b1.fc.weight", "model.parameters()"});
    auto loss = [](const at::Tensor& p, const at::Tensor& t) { return torch::mse_loss(p, t); };
    expect_refused(mode + "the trainer's optimizer on the module's parameters",
                   [&] { kindling::engine::create_supervised_trainer(model, on_the_module, loss); },
                   {"model.parameters()"});
    torch::optim::SGD optimizer(model.parameters(), 0.1);
    kindling::engine::create_supervised_trainer(model, optimizer, loss);  // the right one is taken
    torch::mse_loss(model(x), y).backward();
    optimizer.step();
    model(x);  // the weights are whole now in both modes
    {
      torch::NoGradGuard no_grad;
      net->head->weight.mul_(2);
    }
    expect_refused(mode + "weights changed outside", [&] { model(x); }, {"'head.weight'", "changed in place outside"});
  }
  expect_refused("nested units", [] { kd::auto_model(Outer(), kn::ShardingOptions()); },
                 {"Unit 'outer.inner' lies inside Unit 'outer'"});
  expect_refused("tied weights", [] { kd::auto_model(Tied(), kn::ShardingOptions()); },
                 {"registered as 'w' and as 'c.w'", "untie"});
  kd::finalize();
}

// Ranks that build different models are told so on every rank, naming both.
KINDLING_WORKER(sharding_refuses_ranks_that_differ) {
  initialize();
  auto net = kd::get_rank() == 0 ? kindling::testing::sequential_mlp({12, 8, 4}) : kindling::testing::sequential_mlp({12, 9, 4});
  expect_refused("different models", [&] { kd::auto_model(net, kn::ShardingOptions()); },
                 {"units and parameters", "rank 1", "rank 0"});
  kd::finalize();
}

// The module outlives its sharded model: NaN of their shapes where the weights were not whole in
// their own dtype (ZeRO-3; ZeRO-2 in bfloat16), whole weights otherwise; a new sharded model is
// built on it and, given the weights, computes as the module with them (live recovery does so).
KINDLING_WORKER(sharding_module_outlives_its_model) {
  initialize();
  const auto x = torch::randn({4, 12}), y = torch::randn({4, 4});
  for (const auto& options : {kn::ShardingOptions(), kn::ShardingOptions().reshard_after_forward(false),
                              kn::ShardingOptions().reshard_after_forward(false).param_dtype(at::kBFloat16)}) {
    const bool nan = options.reshard_after_forward() || options.param_dtype().has_value();
    UnitNet net;
    std::vector<std::pair<std::string, at::Tensor>> whole;
    {
      auto model = kd::auto_model(net, options);
      torch::optim::SGD optimizer(model.parameters(), 0.1);
      torch::mse_loss(model(x), y).backward();
      optimizer.step();
      whole = model.sharded()->full_parameters();
    }
    std::size_t i = 0;
    for (const auto& p : net->named_parameters()) {
      WCHECK(p.key() == whole[i].first && p.value().sizes() == whole[i].second.sizes() &&
                 p.value().scalar_type() == at::kFloat,
             << p.key() << " left as " << p.value().sizes() << " " << p.value().scalar_type());
      WCHECK(p.value().isnan().all().item<bool>() == nan, << p.key() << (nan ? " is not NaN" : " is NaN"));
      ++i;
    }
    UnitNet reference;
    {
      torch::NoGradGuard no_grad;
      for (const auto& [name, value] : whole) reference->named_parameters()[name].copy_(value);
    }
    auto again = kd::auto_model(net, options);
    again.sharded()->load_full_parameters(whole);
    const at::Tensor out = again(x), expected = reference->forward(x);
    const double tolerance = options.param_dtype() ? 5e-2 : 1e-6;
    WCHECK(at::allclose(out, expected, tolerance, tolerance), << "the module sharded again computes "
           << out.sum().item<double>() << " instead of " << expected.sum().item<double>());
  }
  kd::finalize();
}

// GradScaler on a sharded model: a scaled step equals the unscaled one bit for bit (scaling by a
// power of two is exact); an overflow in one rank's shard skips the step and backs the scale off
// on every rank; refused while the optimizer steps inside backward.
KINDLING_WORKER(sharding_grad_scaler_decides_over_every_rank) {
  initialize();
  const auto x = torch::randn({4, 12}), y = torch::randn({4, 4});
  for (const bool zero3 : {true, false}) {
    const auto options = kn::ShardingOptions().reshard_after_forward(zero3);
    const std::string mode = zero3 ? "ZeRO-3: " : "ZeRO-2: ";
    UnitNet plain_net, scaled_net;
    {
      torch::NoGradGuard no_grad;
      for (const auto& p : plain_net->named_parameters()) scaled_net->named_parameters()[p.key()].copy_(p.value());
    }
    auto plain = kd::auto_model(plain_net, options), scaled = kd::auto_model(scaled_net, options);
    torch::optim::SGD plain_sgd(plain.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::optim::SGD scaled_sgd(scaled.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    kindling::engine::GradScaler scaler(kindling::engine::GradScalerOptions().init_scale(1024));
    for (int step = 0; step < 3; ++step) {
      plain_sgd.zero_grad();
      scaled_sgd.zero_grad();
      torch::mse_loss(plain(x), y).backward();
      plain_sgd.step();
      scaler.scale(torch::mse_loss(scaled(x), y)).backward();
      WCHECK(scaler.step(scaled_sgd), << mode << "step " << step << " skipped without an overflow");
      scaler.update();
    }
    const auto expected = plain.sharded()->full_parameters(), before = scaled.sharded()->full_parameters();
    for (std::size_t i = 0; i < expected.size(); ++i)
      WCHECK(at::equal(before[i].second, expected[i].second), << mode << before[i].first << " differs from the unscaled step");
    scaled_sgd.zero_grad();
    scaler.scale(torch::mse_loss(scaled(x), y)).backward();
    if (kd::get_rank() == 1)
      for (const auto& p : scaled.parameters())
        if (p.numel() > 0 && p.grad().defined()) {
          p.grad().view({-1})[0].fill_(std::numeric_limits<float>::infinity());
          break;
        }
    WCHECK(!scaler.step(scaled_sgd), << mode << "rank " << kd::get_rank() << " stepped past rank 1's overflow");
    scaler.update();
    WCHECK(scaler.get_scale() == 512.0, << mode << "scale " << scaler.get_scale() << " after the overflow, expected 512");
    const auto after = scaled.sharded()->full_parameters();
    for (std::size_t i = 0; i < after.size(); ++i)
      WCHECK(at::equal(after[i].second, before[i].second), << mode << after[i].first << " changed by a skipped step");
  }
  UnitNet net;
  auto model = kd::auto_model(net, kn::ShardingOptions());
  torch::optim::SGD optimizer(model.parameters(), 0.1);
  model.step_in_backward(optimizer);
  kindling::engine::GradScaler scaler;
  scaler.scale(torch::mse_loss(model(x), y)).backward();
  expect_refused("GradScaler while stepping inside backward", [&] { scaler.step(optimizer); },
                 {"step_in_backward", "turn it off"});
  kd::finalize();
}

class ShardingRulesTest : public kindling::testing::BackendWorldTest {};
TEST_P(ShardingRulesTest, RefusesMisuseWithTheFix) { expect_ok("sharding_refuses_misuse"); }
TEST_P(ShardingRulesTest, RefusesRanksWhoseModelsDiffer) { expect_ok("sharding_refuses_ranks_that_differ"); }
TEST_P(ShardingRulesTest, ModuleOutlivesItsModel) { expect_ok("sharding_module_outlives_its_model"); }
TEST_P(ShardingRulesTest, GradScalerDecidesOverEveryRank) { expect_ok("sharding_grad_scaler_decides_over_every_rank"); }
INSTANTIATE_TEST_SUITE_P(Backends, ShardingRulesTest, ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

// Not distributed: no engine, the module's own parameters, units that only call their module.
TEST(Sharding, SerialIsAPassThrough) {
  UnitNet net;
  auto model = kindling::dist::auto_model(net, kn::ShardingOptions());
  EXPECT_EQ(model.sharded(), nullptr);
  EXPECT_EQ(model.parameters().size(), net->parameters().size());
  EXPECT_TRUE(model.parameters().front().is_same(net->parameters().front()));
  const auto x = torch::randn({3, 12});
  EXPECT_TRUE(torch::equal(model(x), net->forward(x)));
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"b1.fc.weight", "b1.fc.bias", "b2.fc.weight", "b2.fc.bias", "head.weight",
                                             "head.bias"}));
}

}  // namespace sharding_rules_test
