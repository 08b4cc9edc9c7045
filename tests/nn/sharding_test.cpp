// Sharded data-parallel (kindling/nn/sharding.h): ZeRO-2 and ZeRO-3 train as DDP does (bit for
// bit on 2 ranks, 1e-6 on more) with SGD, Adam and AdamW over parameter groups, on a Sequential,
// a model with Units and a model that is one root unit; each rank keeps its share of the weights
// and of the optimizer's state; misuse is refused. Real processes on every CPU backend.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/error.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/optimizer_state.h>
#include <kindling/models/resnet.h>
#include <kindling/nn/sharding.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "support/backend_world_test.h"
#include "support/multiprocess.h"
#include "support/optimizers.h"
#include "support/sharded_models.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;

namespace sharding_test {

using kindling::testing::UnitNet;

torch::nn::Sequential sequential() { return kindling::testing::sequential_mlp({12, 32, 33, 4}); }

// Weights at half the rate of the biases: groups made by name, as a user would on either model.
std::vector<torch::optim::OptimizerParamGroup> groups_of(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                                                         const torch::optim::OptimizerOptions& o) {
  std::vector<torch::Tensor> weights, rest;
  for (const auto& [name, p] : named) (name.find("weight") != std::string::npos ? weights : rest).push_back(p);
  auto slow = o.clone();
  slow->set_lr(o.get_lr() / 2);
  return {torch::optim::OptimizerParamGroup(weights, std::move(slow)), torch::optim::OptimizerParamGroup(rest, o.clone())};
}

std::vector<std::pair<std::string, torch::Tensor>> named(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (const auto& p : m.named_parameters()) all.emplace_back(p.key(), p.value());
  return all;
}

template <class Model>
void train(Model& model, torch::optim::Optimizer& optimizer, int steps) {
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    auto [x, y] = kindling::testing::sharding_batch(step);
    torch::mse_loss(model(x), y).backward();
    optimizer.step();
  }
}

int64_t state_numel(const torch::optim::Optimizer& optimizer) {
  int64_t n = 0;
  for (const auto& kv : kn::optimizer_state_dict(optimizer).at("state").toGenericDict())
    for (const auto& e : kv.value().toGenericDict())
      if (e.value().isTensor()) n += e.value().toTensor().numel();
  return n;
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  if (kd::get_world_size() == 2) {
    WCHECK(torch::equal(a, b), << what << ": not bit for bit, max difference " << (a - b).abs().max().item<double>());
  } else {
    WCHECK(torch::allclose(a, b, 1e-6, 1e-7), << what << ": max difference " << (a - b).abs().max().item<double>());
  }
}

void initialize() {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
}

// Trains a model made by `make` with DDP, then sharded (ZeRO-3 and ZeRO-2, and with `in_backward`
// both again with the optimizer stepping inside backward), with each optimizer.
template <class Holder>
void trains_as_ddp(const std::string& model_name, const std::function<Holder()>& make, bool in_backward = false) {
  const int n = kd::get_world_size();
  const auto kinds = kindling::testing::optimizer_kinds();
  for (const auto& [name, options] : kinds) {
    torch::manual_seed(77);
    Holder plain_net = make();
    auto plain = kd::auto_model(plain_net);
    auto plain_optimizer = kindling::testing::ordinary_optimizer(*options, groups_of(named(*plain_net), *options));
    train(plain, *plain_optimizer, 5);
    const int64_t total_state = state_numel(*plain_optimizer);
    for (int variant = 0; variant < (in_backward ? 4 : 2); ++variant) {
      const bool reshard = variant % 2 == 0, stepping = variant >= 2;
      const std::string what =
          model_name + " " + name + (reshard ? " ZeRO-3" : " ZeRO-2") + (stepping ? " stepping in backward" : "");
      torch::manual_seed(77);
      Holder net = make();
      auto model = kd::auto_model(net, kn::ShardingOptions().reshard_after_forward(reshard));
      auto optimizer = kindling::testing::ordinary_optimizer(*options, groups_of(model.named_parameters(), *options));
      if (stepping) model.step_in_backward(*optimizer);
      train(model, *optimizer, 5);
      const auto whole = model.sharded()->full_parameters();
      const auto reference = named(*plain_net);
      WCHECK(whole.size() == reference.size(), << what << ": " << whole.size() << " parameters, DDP " << reference.size());
      for (std::size_t i = 0; i < whole.size(); ++i) {
        WCHECK(whole[i].first == reference[i].first, << what << ": " << whole[i].first << " against " << reference[i].first);
        expect_close(whole[i].second, reference[i].second.detach(), what + " " + whole[i].first);
      }
      // Each rank steps its chunk: the state's elements add up to DDP's, each rank about 1/n.
      const int64_t mine = state_numel(*optimizer);
      WCHECK(kd::all_reduce(mine) == total_state, << what << ": the ranks hold " << kd::all_reduce(mine) << " of "
                                                   << total_state << " state elements");
      WCHECK(mine <= total_state / n + 3 * 3 * n, << what << ": rank " << kd::get_rank() << " holds " << mine << " of "
                                                  << total_state);
    }
  }
}

KINDLING_WORKER(sharding_trains_as_ddp) {
  initialize();
  trains_as_ddp<torch::nn::Sequential>("sequential", sequential);
  trains_as_ddp<UnitNet>("units", [] { return UnitNet(); }, /*in_backward=*/true);
  trains_as_ddp<kindling::testing::Mlp3>("root only", [] { return kindling::testing::Mlp3(); });
  kd::finalize();
}

int64_t module_numel(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// What a rank holds: 1/n of the weights between steps (ZeRO-3), at most two units gathered at
// once in forward and backward (the one computing and the next, prefetched), after forward only
// the last unit, which backward needs first, and (ZeRO-3) whole gradients of at most two units.
KINDLING_WORKER(sharding_keeps_its_share) {
  initialize();
  const int n = kd::get_world_size();
  const int64_t unit = 64 * 64 + 64, total = 4 * unit;
  const int64_t chunk = (unit + n - 1) / n;  // a unit's buffer: n chunks, padded
  for (bool reshard : {true, false}) {
    const std::string what = reshard ? "ZeRO-3" : "ZeRO-2";
    auto net = kindling::testing::sequential_mlp({64, 64, 64, 64, 64});
    auto model = kd::auto_model(net, kn::ShardingOptions().reshard_after_forward(reshard));
    torch::optim::Adam optimizer(model.parameters(), torch::optim::AdamOptions(1e-3));
    auto* sharded = model.sharded();
    const int64_t resident = sharded->resident_parameter_numel();
    WCHECK(resident == 4 * chunk + (reshard ? 0 : 4 * chunk * n), << what << ": resident " << resident << ", chunk " << chunk);
    WCHECK(module_numel(*net) == (reshard ? 0 : total), << what << ": the module holds " << module_numel(*net));
    for (int step = 0; step < 3; ++step) {
      if (step == 2) sharded->reset_peaks();
      optimizer.zero_grad();
      auto x = torch::randn({8, 64});
      auto loss = model(x).pow(2).mean();
      // After forward: ZeRO-3 keeps only the unit that backward needs first (the last one, once a
      // forward has shown the order) whole; ZeRO-2 keeps all.
      const int64_t whole = module_numel(*net);
      WCHECK(whole == (!reshard ? total : step == 0 ? 0 : unit), << what << " step " << step << ": " << whole
                                                                  << " elements whole after forward");
      loss.backward();
      optimizer.step();
      WCHECK(sharded->resident_parameter_numel() == resident, << what << " step " << step << ": resident "
                                                              << sharded->resident_parameter_numel());
    }
    const int64_t peak = sharded->peak_gathered_numel();
    WCHECK(peak == (reshard ? 2 : 4) * chunk * n, << what << ": peak gathered " << peak << ", unit " << chunk * n);
    // Whole gradients under ZeRO-3: the unit reducing and the next one accumulating, never all
    // four (ZeRO-2 does not wait: up to all four, as fast as the reductions come in).
    const int64_t grads = sharded->peak_whole_gradient_numel();
    WCHECK(reshard ? grads == 2 * chunk * n : grads <= 4 * chunk * n && grads >= chunk * n,
           << what << ": peak whole gradients " << grads << ", unit " << chunk * n);
    WCHECK(state_numel(optimizer) <= 2 * 4 * chunk, << what << ": state " << state_numel(optimizer));
  }
  kd::finalize();
}

// no_sync for one micro-batch in two, and clipping by the global norm, as DDP with LibTorch's
// clip_grad_norm_; then the same through create_supervised_trainer's gradient accumulation.
KINDLING_WORKER(sharding_accumulates_and_clips) {
  initialize();
  const torch::optim::SGDOptions options = torch::optim::SGDOptions(0.1).momentum(0.9);
  torch::manual_seed(5);
  UnitNet plain_net;
  auto plain = kd::auto_model(plain_net);
  torch::optim::SGD plain_optimizer(plain_net->parameters(), options);
  torch::manual_seed(5);
  UnitNet net;
  auto model = kd::auto_model(net, kn::ShardingOptions());
  torch::optim::SGD optimizer(model.parameters(), options);
  for (int step = 0; step < 6; ++step) {
    auto [x, y] = kindling::testing::sharding_batch(step);
    if (step % 2 == 0) {
      auto a = plain.no_sync();
      torch::mse_loss(plain(x), y).backward();
      auto b = model.no_sync();
      torch::mse_loss(model(x), y).backward();
      continue;
    }
    torch::mse_loss(plain(x), y).backward();
    torch::mse_loss(model(x), y).backward();
    const double plain_norm = torch::nn::utils::clip_grad_norm_(plain_net->parameters(), 0.05);
    const double norm = model.clip_grad_norm(0.05);
    WCHECK(std::abs(norm - plain_norm) <= 1e-6 * plain_norm, << "step " << step << ": norm " << norm << ", DDP's " << plain_norm);
    WCHECK(norm > 0.05, << "step " << step << ": the norm " << norm << " did not need clipping");
    plain_optimizer.step();
    optimizer.step();
    plain_optimizer.zero_grad();
    optimizer.zero_grad();
  }
  const auto whole = model.sharded()->full_parameters();
  const auto reference = named(*plain_net);
  for (std::size_t i = 0; i < whole.size(); ++i)
    WCHECK(torch::allclose(whole[i].second, reference[i].second.detach(), 1e-5, 1e-7),
           << whole[i].first << ": max difference " << (whole[i].second - reference[i].second).abs().max().item<double>());
  kd::finalize();
}

// kindling's ResNet: its four layers are the units, BatchNorm's buffers are broadcast; two steps
// of SGD as DDP's (bit for bit on 2 ranks).
KINDLING_WORKER(sharding_resnet_trains_as_ddp) {
  initialize();
  const auto options = kindling::models::ResNetOptions().num_classes(4).cifar_stem(true);
  auto make = [&] { return kindling::models::ResNet(kindling::models::ResNetBlock::kBasic, std::vector<int64_t>{1, 1, 1, 1}, options); };
  torch::manual_seed(9);
  auto plain_net = make();
  auto plain = kd::auto_model(plain_net);
  torch::optim::SGD plain_optimizer(plain_net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::manual_seed(9);
  auto net = make();
  auto model = kd::auto_model(net, kn::ShardingOptions());
  WCHECK((model.sharded()->units() == std::vector<std::string>{"", "layer1", "layer2", "layer3", "layer4"}),
         << "units: " << model.sharded()->units().size());
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  // 4 images of 16x16: with 2 of 8x8, layer4's BatchNorm normalises 2 values, and gloo's ring
  // order of the all-reduce (not the rank order of the sum) grew to 1e-4 after the second step.
  for (int step = 0; step < 2; ++step) {
    torch::manual_seed(50 + step + 10 * kd::get_rank());
    const auto x = torch::randn({4, 3, 16, 16});
    const auto y = torch::randint(4, {4});
    for (auto* o : std::vector<torch::optim::Optimizer*>{&plain_optimizer, &optimizer}) o->zero_grad();
    torch::nll_loss(torch::log_softmax(plain(x), 1), y).backward();
    torch::nll_loss(torch::log_softmax(model(x), 1), y).backward();
    plain_optimizer.step();
    optimizer.step();
  }
  const auto whole = model.sharded()->full_parameters();
  const auto reference = named(*plain_net);
  for (std::size_t i = 0; i < whole.size(); ++i) expect_close(whole[i].second, reference[i].second.detach(), whole[i].first);
  for (const auto& b : net->named_buffers())
    expect_close(b.value(), plain_net->named_buffers()[b.key()], "buffer " + b.key());
  kd::finalize();
}

// Mixed precision: the gathered weights compute in bfloat16, the shards, their gradients and
// the optimizer's state stay float32, the result comes back as float32. After 5 steps of SGD with
// momentum each parameter's change is float32 DDP's within bfloat16's rounding: stated bound,
// |change - DDP's change| <= 0.05 |DDP's change| (bfloat16 keeps 8 bits: 0.4% per rounding,
// compounded through forward and backward), with the gradients reduced in float32 or bfloat16.
KINDLING_WORKER(sharding_mixed_precision) {
  initialize();
  const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9);
  torch::manual_seed(77);
  UnitNet plain_net;
  std::vector<torch::Tensor> start;
  for (const auto& p : plain_net->parameters()) start.push_back(p.detach().clone());
  auto plain = kd::auto_model(plain_net);
  torch::optim::SGD plain_optimizer(plain_net->parameters(), sgd);
  train(plain, plain_optimizer, 5);
  double worst = 0;
  for (bool reshard : {true, false})
    for (auto reduce : {at::kFloat, at::kBFloat16}) {
      const std::string what = std::string(reshard ? "ZeRO-3" : "ZeRO-2") + ", reduced in " + c10::toString(reduce);
      torch::manual_seed(77);
      UnitNet net;
      auto model = kd::auto_model(
          net, kn::ShardingOptions().reshard_after_forward(reshard).param_dtype(at::kBFloat16).reduce_dtype(reduce));
      torch::optim::SGD optimizer(model.parameters(), sgd);
      train(model, optimizer, 5);
      const auto out = model(kindling::testing::sharding_batch(0).first);
      WCHECK(out.scalar_type() == at::kFloat, << what << ": the result is " << out.scalar_type());
      if (!reshard)  // ZeRO-2 keeps the gathered weights: in the compute dtype
        WCHECK(net->head->weight.scalar_type() == at::kBFloat16, << what << ": " << net->head->weight.scalar_type());
      for (const auto& p : model.parameters())
        WCHECK(p.scalar_type() == at::kFloat && (!p.grad().defined() || p.grad().scalar_type() == at::kFloat),
               << what << ": a shard or its gradient is not float32");
      const auto whole = model.sharded()->full_parameters();
      const auto reference = plain_net->parameters();
      for (std::size_t i = 0; i < whole.size(); ++i) {
        const auto change = reference[i].detach() - start[i];
        const double off = (whole[i].second - start[i] - change).norm().item<double>() / change.norm().item<double>();
        worst = std::max(worst, off);
        WCHECK(off <= 0.05, << what << " " << whole[i].first << ": the change is " << off << " of DDP's off");
        WCHECK(off > 0, << what << " " << whole[i].first << ": equal to float32 DDP's: bfloat16 not used?");
      }
    }
  if (kd::get_rank() == 0) std::printf("mixed precision: worst change off by %.4f of float32 DDP's\n", worst);
  kd::finalize();
}

class ShardingTest : public kindling::testing::BackendWorldTest {};
TEST_P(ShardingTest, TrainsAsDdpWithItsShareOfWeightsAndState) { expect_ok("sharding_trains_as_ddp"); }
TEST_P(ShardingTest, ResNetTrainsAsDdpWithItsLayersAsUnits) { expect_ok("sharding_resnet_trains_as_ddp"); }
TEST_P(ShardingTest, MixedPrecisionComputesInBfloat16WithFloat32Shards) { expect_ok("sharding_mixed_precision"); }
TEST_P(ShardingTest, KeepsItsShareAndAtMostTwoUnitsGathered) { expect_ok("sharding_keeps_its_share"); }
TEST_P(ShardingTest, AccumulatesWithoutSyncAndClipsByTheGlobalNorm) { expect_ok("sharding_accumulates_and_clips"); }
INSTANTIATE_TEST_SUITE_P(Backends, ShardingTest, ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3, 4})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

}  // namespace sharding_test
