// create_supervised_trainer / create_supervised_evaluator with ignite's options, and the
// engine's state_dict round trip and load errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "support/errors.h"
#include "kindling/engine/engine.h"
#include "kindling/engine/supervised.h"
#include "kindling/dist/auto.h"
#include "kindling/dist/dist.h"
#include "kindling/metrics/accuracy.h"
#include "support/multiprocess.h"

namespace {

namespace km = kindling::metrics;
using kindling::UsageError;
using kindling::data::Example;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::RunOptions;
using kindling::engine::SupervisedEvaluatorOptions;
using kindling::engine::SupervisedTrainerOptions;
using kindling::engine::Value;

at::Tensor mse(const at::Tensor& p, const at::Tensor& y) { return (p - y).pow(2).mean(); }

std::vector<Example> regression_batches(int n) {
  at::manual_seed(3);
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) out.push_back({at::randn({4, 3}), at::randn({4, 2})});
  return out;
}

torch::nn::Linear linear() {
  at::manual_seed(5);
  return torch::nn::Linear(3, 2);
}

using kindling::testing::error_of;

TEST(SupervisedTrainerTest, GradientAccumulationStepsEveryNIterations) {
  const auto data = regression_batches(4);
  // Reference: by hand, gradients of 2 batches (each loss / 2) accumulated, then one step.
  auto ref = linear();
  torch::optim::SGD ref_opt(ref->parameters(), 0.1);
  for (int i = 0; i < 4; i += 2) {
    ref_opt.zero_grad();
    for (int k = i; k < i + 2; ++k) (mse(ref->forward(data[k].data), data[k].target) / 2).backward();
    ref_opt.step();
  }
  auto model = linear();
  torch::optim::SGD opt(model->parameters(), 0.1);
  Engine trainer = kindling::engine::create_supervised_trainer(
      model, opt, mse, SupervisedTrainerOptions().gradient_accumulation_steps(2));
  std::vector<double> outputs;
  trainer.on(Events::ITERATION_COMPLETED, [&](Engine& e) { outputs.push_back(e.state().output.number()); });
  trainer.run(data, 1);
  EXPECT_TRUE(at::allclose(model->weight, ref->weight)) << model->weight << ref->weight;
  EXPECT_TRUE(at::allclose(model->bias, ref->bias));
  // The output is the undivided loss of the batch (before the step that follows it).
  EXPECT_NEAR(outputs[0], mse(linear()->forward(data[0].data), data[0].target).item<double>(), 1e-6);
  EXPECT_THROW(kindling::engine::create_supervised_trainer(model, opt, mse,
                                                           SupervisedTrainerOptions().gradient_accumulation_steps(0)),
               UsageError);
}

TEST(SupervisedTrainerTest, TransformsAndPrepareBatch) {
  auto model = linear();
  torch::optim::SGD opt(model->parameters(), 0.0);
  bool prepared = false;
  Engine trainer = kindling::engine::create_supervised_trainer(
      model, opt, mse,
      SupervisedTrainerOptions()
          .device(c10::Device(c10::kCPU))
          .prepare_batch([&](const Example& b, std::optional<c10::Device> d, bool) {
            prepared = d.has_value();
            return std::make_pair(b.data * 0, b.target);
          })
          .model_transform([](const at::Tensor& out) { return out * 0; })
          .output_transform(
              [](const at::Tensor& x, const at::Tensor& y, const at::Tensor& y_pred, const at::Tensor& loss) {
                return Value::named({{"y_pred", y_pred}, {"loss", loss}});
              }));
  trainer.run(regression_batches(1), 1);
  EXPECT_TRUE(prepared);
  EXPECT_TRUE(at::equal(trainer.state().output["y_pred"], at::zeros({4, 2})));
  EXPECT_NEAR(trainer.state().output["loss"].item<double>(),
              regression_batches(1)[0].target.pow(2).mean().item<double>(), 1e-6);
}

TEST(SupervisedEvaluatorTest, EvalModeWithoutGradientsAndModeRestored) {
  auto model = torch::nn::BatchNorm1d(3);
  model->train(true);
  bool saw_eval = false, saw_grad = true;
  auto acc = std::make_shared<km::Accuracy>();
  Engine evaluator = kindling::engine::create_supervised_evaluator(
      model, {{"accuracy", acc}},
      SupervisedEvaluatorOptions().output_transform(
          [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& y_pred) {
            saw_eval = !model->is_training();
            saw_grad = y_pred.requires_grad();
            return Value{y_pred, y};
          }));
  std::vector<Example> data{{at::tensor({1.0f, 0.0f, 0.0f, 0.0f, 5.0f, 0.0f}).view({2, 3}), at::zeros({2}, at::kLong)}};
  const at::Tensor running_mean = model->running_mean.clone();
  evaluator.run(data, 1);
  EXPECT_TRUE(saw_eval);
  EXPECT_FALSE(saw_grad);
  EXPECT_TRUE(model->is_training());                          // restored (ignite leaves the model in eval mode)
  EXPECT_TRUE(at::equal(model->running_mean, running_mean));  // eval mode: statistics untouched
  EXPECT_DOUBLE_EQ(evaluator.state().metrics.at("accuracy").number(), 0.5);
  EXPECT_TRUE(acc->is_attached(evaluator));
}

TEST(EngineStateDictTest, RoundTripWithUserKeys) {
  Engine a([](Engine&, const int& b) -> Value { return b; });
  a.state_dict_user_keys().push_back("alpha");
  a.state().attributes["alpha"] = 0.25;
  std::vector<int> data{1, 2, 3};
  a.run(data, RunOptions().max_epochs(4).epoch_length(3));
  auto sd = a.state_dict();
  EXPECT_EQ(sd.at("iteration").toInt(), 12);
  EXPECT_EQ(sd.at("epoch_length").toInt(), 3);
  EXPECT_EQ(sd.at("max_epochs").toInt(), 4);
  EXPECT_DOUBLE_EQ(sd.at("alpha").toDouble(), 0.25);
  Engine b([](Engine&, const int& x) -> Value { return x; });
  b.state_dict_user_keys().push_back("alpha");
  b.load_state_dict(sd);
  EXPECT_EQ(b.state().iteration, 12);
  EXPECT_EQ(b.state().epoch, 4);
  EXPECT_DOUBLE_EQ(b.state().attributes.at("alpha").number(), 0.25);
}

TEST(EngineStateDictTest, LoadErrorsAsIgniteAndNothingChanges) {
  Engine e([](Engine&, const int& b) -> Value { return b; });
  auto make = [](std::vector<std::pair<std::string, c10::IValue>> items) {
    kindling::StateDict sd = kindling::new_state_dict();
    for (auto& kv : items) sd.insert(kv.first, kv.second);
    return sd;
  };
  EXPECT_NE(error_of([&] {
              e.load_state_dict(make({{"iteration", 5}, {"max_epochs", 3}}));
            }).find("required state attribute 'epoch_length' is absent"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              e.load_state_dict(make({{"epoch_length", 3}, {"iteration", 5}, {"epoch", 1}, {"max_epochs", 3}}));
            }).find("only one of"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              e.load_state_dict(make({{"epoch_length", 3}, {"iteration", 5}}));
            }).find("'max_epochs', 'max_iters'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              e.load_state_dict(make({{"epoch_length", 3}, {"iteration", 5}, {"max_epochs", 3}, {"max_iters", 9}}));
            }).find("'max_epochs', 'max_iters'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              e.load_state_dict(make({{"epoch_length", 3}, {"iteration", 10}, {"max_epochs", 2}}));
            }).find("max_epochs should be larger than or equal to the current epoch"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              e.load_state_dict(make({{"epoch_length", 3}, {"iteration", 10}, {"max_iters", 9}}));
            }).find("max_iters should be larger than or equal to the current iteration"),
            std::string::npos);
  e.state_dict_user_keys().push_back("beta");
  EXPECT_NE(error_of([&] {
              e.load_state_dict(make({{"epoch_length", 3}, {"iteration", 5}, {"max_epochs", 3}}));
            }).find("'beta'"),
            std::string::npos);
  EXPECT_EQ(e.state().iteration, 0);  // every failed load left the state as it was
  EXPECT_FALSE(e.state().max_epochs.has_value());
  // An epoch instead of an iteration: the iteration is derived.
  e.state_dict_user_keys().clear();
  e.load_state_dict(make({{"epoch_length", 3}, {"epoch", 2}, {"max_epochs", 3}}));
  EXPECT_EQ(e.state().iteration, 6);
  std::vector<int> processed;
  Engine f([&](Engine&, const int& b) -> Value {
    processed.push_back(b);
    return b;
  });
  f.load_state_dict(make({{"epoch_length", 3}, {"epoch", 2}, {"max_epochs", 3}}));
  std::vector<int> data{1, 2, 3};
  f.run(data);
  EXPECT_EQ(processed, (std::vector<int>{1, 2, 3}));  // only the third epoch runs
  EXPECT_EQ(f.state().epoch, 3);
}

// DDP through the trainer with gradient accumulation (the backward passes between steps skip
// the all-reduce): every rank ends with the weights one process gets on the whole batches.
KINDLING_WORKER(ddp_trainer_with_accumulation) {
  namespace kd = kindling::dist;
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int r = kd::get_rank(), ws = kd::get_world_size();
  const auto full = regression_batches(4);  // batches of 4 rows; each rank takes 4 / ws of them
  std::vector<Example> mine;
  for (const auto& b : full) {
    const int64_t rows = 4 / ws;
    mine.push_back({b.data.narrow(0, r * rows, rows), b.target.narrow(0, r * rows, rows)});
  }
  auto ref = linear();
  torch::optim::SGD ref_opt(ref->parameters(), 0.1);
  Engine ref_trainer = kindling::engine::create_supervised_trainer(
      ref, ref_opt, mse, SupervisedTrainerOptions().gradient_accumulation_steps(2));
  ref_trainer.run(full, 1);
  auto model = kd::auto_model(linear());
  torch::optim::SGD opt(model->parameters(), 0.1);
  Engine trainer = kindling::engine::create_supervised_trainer(
      model, opt, mse, SupervisedTrainerOptions().gradient_accumulation_steps(2));
  trainer.run(mine, 1);
  WCHECK(at::allclose(model->weight, ref->weight, 1e-5, 1e-6), << model->weight << " vs " << ref->weight);
  WCHECK(at::allclose(model->bias, ref->bias, 1e-5, 1e-6));
  kd::finalize();
}

TEST(SupervisedTrainerTest, DdpWithAccumulationMatchesOneProcess) {
  for (const auto& [backend, ws] : kindling::testing::cpu_backend_world_sizes({2})) {
    kindling::testing::LaunchOptions opts;
    opts.backend = backend;
    opts.world_size = ws;
    auto results = kindling::testing::run_workers("ddp_trainer_with_accumulation", opts);
    for (const auto& res : results) EXPECT_TRUE(res.ok()) << kindling::testing::describe(results);
  }
}

// AMP on one rank only (a flag given to one rank): every rank refuses the trainer, naming it.
KINDLING_WORKER(trainer_amp_on_one_rank) {
  namespace kd = kindling::dist;
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  auto model = kd::auto_model(linear());
  torch::optim::SGD opt(model->parameters(), 0.1);
  const std::string what = error_of([&] {
    kindling::engine::create_supervised_trainer(model, opt, mse, SupervisedTrainerOptions().amp(kd::get_rank() == 1));
  });
  WCHECK(what.find("create_supervised_trainer: the ranks were given different settings (rank 1 has amp=true but "
                   "rank 0 has amp=false)") != std::string::npos,
         << what);
  kd::finalize();
}

TEST(SupervisedTrainerTest, AmpOnOneRankOnlyIsRefusedOnEveryRank) {
  kindling::testing::LaunchOptions opts;
  opts.world_size = 2;
  auto results = kindling::testing::run_workers("trainer_amp_on_one_rank", opts);
  for (const auto& res : results) EXPECT_TRUE(res.ok()) << kindling::testing::describe(results);
}

}  // namespace

namespace {

// ignite.utils.apply_to_tensor and convert_tensor (kindling/engine/value.h): every tensor of
// each kind of Value, names and order kept; nothing and numbers untouched.
TEST(ValueToolsTest, ApplyToTensorAndConvertTensorReachEveryTensor) {
  auto twice = [](const at::Tensor& t) { return t * 2; };
  const at::Tensor a = at::arange(3), b = at::ones({2});
  EXPECT_TRUE(at::equal(kindling::engine::apply_to_tensor(Value(a), twice).tensor(), a * 2));
  const Value tuple = kindling::engine::apply_to_tensor(Value{a, b}, twice);
  ASSERT_TRUE(tuple.is_tuple());
  EXPECT_TRUE(at::equal(tuple[0], a * 2));
  EXPECT_TRUE(at::equal(tuple[1], b * 2));
  const Value named = kindling::engine::apply_to_tensor(Value::named({{"y", a}, {"loss", b}}), twice);
  ASSERT_TRUE(named.is_named());
  EXPECT_TRUE(at::equal(named["y"], a * 2));
  EXPECT_TRUE(at::equal(named["loss"], b * 2));
  EXPECT_EQ(kindling::engine::apply_to_tensor(Value(1.5), twice).number(), 1.5);
  EXPECT_TRUE(kindling::engine::apply_to_tensor(Value(), twice).is_none());

  const Value moved = kindling::engine::convert_tensor(Value{a, b}, c10::Device(c10::kCPU));
  EXPECT_TRUE(moved.is_tuple() && at::equal(moved[0], a) && moved[1].device().is_cpu());
  const Value same = kindling::engine::convert_tensor(Value{a, b});
  EXPECT_TRUE(same[0].is_same(a)) << "no device: the same tensors, as ignite's device=None";
  EXPECT_THROW(kindling::engine::apply_to_tensor(
                   Value{a}, [](const at::Tensor&) -> at::Tensor { throw std::runtime_error("from fn"); }),
               std::runtime_error);
}

// ignite.utils.to_onehot: the class dimension second, uint8, on the indices' device; worked by
// hand, and refused input named.
TEST(ValueToolsTest, ToOnehotPutsTheClassesSecond) {
  const at::Tensor hot = kindling::engine::to_onehot(at::tensor({2L, 0L, 1L}), 4);
  EXPECT_EQ(hot.scalar_type(), at::kByte);
  EXPECT_TRUE(at::equal(hot, at::tensor({0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0}, at::kByte).reshape({3, 4})));
  const at::Tensor image = at::tensor({0, 1, 1, 2}, at::kInt).reshape({1, 2, 2});  // (N, H, W) labels
  const at::Tensor maps = kindling::engine::to_onehot(image, 3);
  ASSERT_EQ(maps.sizes(), (std::vector<int64_t>{1, 3, 2, 2}));
  EXPECT_TRUE(at::equal(maps.argmax(1), image.to(at::kLong)));
  EXPECT_TRUE(at::equal(maps.sum(1), at::ones({1, 2, 2}, at::kLong)));
  using kindling::testing::error_of;
  EXPECT_NE(error_of([] {
              kindling::engine::to_onehot(at::tensor({0L, 4L}), 4);
            }).find("indices must lie in [0, 4), got values in [0, 4]"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              kindling::engine::to_onehot(at::tensor({0.5, 1.5}), 2);
            }).find("indices must be an integer tensor of shape (N, ...), got tensor[2] Double"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { kindling::engine::to_onehot(at::tensor({0L}), 0); }).find("num_classes must be at least 1, got 0"),
      std::string::npos);
}

}  // namespace
