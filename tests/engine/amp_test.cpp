// Autocast scopes (CPU bfloat16) and GradScaler's dynamic loss scaling (skipped steps,
// backoff, growth, unscaling, state_dict), alone and through create_supervised_trainer.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <limits>
#include <vector>

#include "kindling/engine/amp.h"
#include "kindling/engine/supervised.h"

namespace {

using kindling::engine::Autocast;
using kindling::engine::Engine;
using kindling::engine::GradScaler;
using kindling::engine::GradScalerOptions;
using kindling::engine::SupervisedTrainerOptions;

TEST(AutocastTest, CpuBfloat16InsideTheScopeOnly) {
  const at::Tensor a = at::randn({4, 4}), b = at::randn({4, 4});
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
  {
    Autocast outer(c10::kCPU);
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
    {
      Autocast off(c10::kCPU, std::nullopt, /*enabled=*/false);  // a disabled scope changes nothing
      EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
    }
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
  EXPECT_THROW(Autocast(c10::kMeta), kindling::UsageError);
}

TEST(GradScalerTest, SkipsOverflowingStepsBacksOffAndGrows) {
  at::manual_seed(0);
  torch::nn::Linear model(3, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  GradScaler scaler(GradScalerOptions().init_scale(1024).growth_interval(2));
  auto backward = [&](double poison) {
    optimizer.zero_grad();
    at::Tensor loss = model->forward(at::ones({2, 3})).sum() * poison;
    scaler.scale(loss).backward();
  };
  const at::Tensor w0 = model->weight.detach().clone();
  backward(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(scaler.step(optimizer));
  scaler.update();
  EXPECT_TRUE(at::equal(model->weight, w0));  // skipped
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512);  // backed off

  backward(1.0);
  scaler.unscale_(optimizer);
  // Unscaled: d(sum of outputs)/dW = 2 (two rows of ones) for every weight.
  EXPECT_TRUE(at::allclose(model->weight.grad(), at::full({1, 3}, 2.0f)));
  EXPECT_THROW(scaler.unscale_(optimizer), kindling::UsageError);
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();
  EXPECT_FALSE(at::equal(model->weight, w0));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512);
  backward(1.0);
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 1024);  // grown after growth_interval good steps

  GradScaler other;
  other.load_state_dict(scaler.state_dict());
  EXPECT_DOUBLE_EQ(other.get_scale(), 1024);
  EXPECT_THROW(GradScaler(GradScalerOptions().backoff_factor(1.5)), kindling::UsageError);
  GradScaler off(GradScalerOptions().enabled(false));
  EXPECT_DOUBLE_EQ(off.get_scale(), 1.0);
}

TEST(GradScalerTest, TrainerWithAmpAndScalerOnCpu) {
  at::manual_seed(1);
  torch::nn::Linear model(8, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  auto scaler = std::make_shared<GradScaler>();
  std::vector<at::ScalarType> output_types;
  auto mse = [](const at::Tensor& p, const at::Tensor& y) { return (p.to(at::kFloat) - y).pow(2).mean(); };
  Engine trainer = kindling::engine::create_supervised_trainer(
      model, optimizer, mse,
      SupervisedTrainerOptions().amp(true).scaler(scaler).output_transform(
          [&](const at::Tensor&, const at::Tensor&, const at::Tensor& y_pred, const at::Tensor& loss) {
            output_types.push_back(y_pred.scalar_type());
            return kindling::engine::Value(loss.item<double>());
          }));
  std::vector<kindling::data::Example> data;
  for (int i = 0; i < 20; ++i) {
    const at::Tensor x = at::randn({16, 8});
    data.push_back({x, x.sum(1, true) * 0.5});
  }
  std::vector<double> losses;
  trainer.on(kindling::engine::Events::ITERATION_COMPLETED,
             [&](Engine& e) { losses.push_back(e.state().output.number()); });
  trainer.run(data, 3);
  EXPECT_LT(losses.back(), losses.front() * 0.5) << losses.front() << " -> " << losses.back();
  EXPECT_EQ(output_types.front(), at::kBFloat16);  // the forward ran under CPU autocast
  EXPECT_DOUBLE_EQ(scaler->get_scale(), 65536.0);  // no overflow in 60 steps (growth_interval 2000)
  EXPECT_THROW(
      kindling::engine::create_supervised_trainer(model, optimizer, mse, SupervisedTrainerOptions().scaler(scaler)),
      kindling::UsageError);
}

}  // namespace
