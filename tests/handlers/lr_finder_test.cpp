// FastaiLRFinder: the exact lr schedule (exp and linear, as the process function sees it), the
// smoothing and the divergence stop on a known loss sequence, num_iter beyond the run, a real
// linear regression whose loss falls then diverges (suggestion inside the falling part,
// model, SGD momentum buffers and trainer restored bit for bit), the misuse errors, and 2
// gloo ranks with different data that stop together with the same suggestion.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/schedulers/lr_finder.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "support/errors.h"
#include "support/multiprocess.h"

namespace {

namespace kh = kindling::handlers;
namespace kd = kindling::dist;
using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;
using FinderOptions = kh::FastaiLRFinderOptions;

constexpr double kNoDivergence = std::numeric_limits<double>::infinity();

double optimizer_lr(const torch::optim::Optimizer& o, std::size_t group = 0) {
  return o.param_groups()[group].options().get_lr();
}

// Copies of the SGD momentum buffers, by parameter index (through the optimizer's state dict).
std::vector<at::Tensor> momentum_buffers(torch::optim::Optimizer& o) {
  const auto states = kh::stateful(o)->state_dict().at("state").toGenericDict();
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < static_cast<int64_t>(states.size()); ++i) {
    out.push_back(states.at(c10::IValue(i)).toGenericDict().at("momentum_buffer").toTensor().clone());
  }
  return out;
}

// A trainer whose i-th iteration of a run returns losses[i - 1] (the last one afterwards) and
// records the lr the optimizer holds while it runs.
struct ScriptedTrainer {
  at::Tensor weight = at::zeros({2}).requires_grad_(true);
  torch::optim::SGD optimizer{std::vector<at::Tensor>{weight}, torch::optim::SGDOptions(0.5)};
  std::vector<double> seen_lr;
  Engine trainer;
  explicit ScriptedTrainer(std::vector<double> losses)
      : trainer([this, losses](Engine& e, const int&) -> Value {
          seen_lr.push_back(optimizer_lr(optimizer));
          const std::size_t i = static_cast<std::size_t>(e.state().iteration - 1);
          return losses[std::min(i, losses.size() - 1)];
        }) {}
};

// y = slope * x + 0.5 + noise over 32 points, fitted by Linear(1, 1) with SGD + momentum.
struct RegressionTrainer {
  at::Tensor x, y;
  torch::nn::Linear model{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer;
  int64_t iterations = 0;  // process-function calls
  Engine trainer;
  RegressionTrainer(double slope, uint64_t noise_seed)
      : trainer([this](Engine&, const int&) -> Value {
          ++iterations;
          optimizer->zero_grad();
          at::Tensor loss = torch::nn::functional::mse_loss(model->forward(x), y);
          loss.backward();
          optimizer->step();
          return loss.item<double>();
        }) {
    at::Generator gen = at::detail::createCPUGenerator(noise_seed);
    x = at::linspace(-1, 1, 32).unsqueeze(1);
    y = slope * x + 0.5 + 0.1 * at::randn({32, 1}, gen);
    torch::manual_seed(0);
    model = torch::nn::Linear(1, 1);
    optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  }
};

TEST(FastaiLRFinderTest, LrGoesFromStartToEndExactly) {
  for (const std::string mode : {"exp", "linear"}) {
    ScriptedTrainer t({1.0});
    auto finder = std::make_shared<kh::FastaiLRFinder>();
    const double start = 0.01, end = 10.0;
    const int64_t n = 5;
    ::testing::internal::CaptureStderr();
    {
      auto attached = finder->attach(
          t.trainer, {}, t.optimizer,
          FinderOptions().start_lr({start}).end_lr({end}).num_iter(n).step_mode(mode).diverge_th(kNoDivergence));
      attached.trainer().run(std::vector<int>(100, 0), 1);
    }
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("completed without the loss diverging"), std::string::npos) << log;
    ASSERT_EQ(t.seen_lr.size(), 5u) << mode;  // num_iter iterations, not num_iter + 1 (see the header)
    const auto& r = finder->get_results();
    ASSERT_EQ(r.lr.size(), 5u);
    ASSERT_EQ(r.loss.size(), 5u);
    for (int64_t i = 0; i < n; ++i) {
      const double frac = static_cast<double>(i) / static_cast<double>(n - 1);
      const double expected = mode == "exp" ? start * std::pow(end / start, frac) : start + (end - start) * frac;
      EXPECT_DOUBLE_EQ(t.seen_lr[i], expected) << mode << " " << i;
      EXPECT_EQ(r.lr[i], std::vector<double>{t.seen_lr[i]}) << mode << " " << i;  // the lr its loss ran with
    }
    EXPECT_EQ(t.seen_lr.front(), start);
    EXPECT_DOUBLE_EQ(t.seen_lr.back(), end);
    EXPECT_FALSE(finder->diverged());
    EXPECT_EQ(optimizer_lr(t.optimizer), 0.5);  // restored
  }
}

TEST(FastaiLRFinderTest, SmoothsTheLossAndStopsWhenItDiverges) {
  const std::vector<double> raw{10, 8, 6, 5, 4, 30, 100, 500, 1000};
  for (const double smooth_f : {0.5, 0.0}) {
    ScriptedTrainer t(raw);
    auto finder = std::make_shared<kh::FastaiLRFinder>();
    {
      auto attached = finder->attach(t.trainer, {}, t.optimizer,
                                     FinderOptions().smooth_f(smooth_f).diverge_th(2).end_lr({1.0}).num_iter(50));
      t.trainer.run(std::vector<int>(50, 0), 1);
    }
    // s_0 = l_0, s_i = f * l_i + (1 - f) * s_{i-1} (f = 0: s_i = l_i, as ignite); stop after the
    // first s_i > 2 * min(s).
    std::vector<double> expected;
    double best = 0;
    for (double l : raw) {
      const double s = expected.empty() || smooth_f == 0 ? l : smooth_f * l + (1 - smooth_f) * expected.back();
      if (expected.empty() || s < best) best = s;
      expected.push_back(s);
      if (s > 2 * best) break;
    }
    EXPECT_EQ(expected.size(), 6u);  // 0.5: 17.5625 > 2 * 5.125; 0: 30 > 2 * 4
    const auto& r = finder->get_results();
    ASSERT_EQ(r.loss.size(), expected.size()) << smooth_f;
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_DOUBLE_EQ(r.loss[i], expected[i]) << i;
    EXPECT_TRUE(finder->diverged());
    EXPECT_EQ(t.seen_lr.size(), expected.size());  // terminated at once
    // Falling over 5 points (to index 4); the central differences at 1, 2, 3 are -1.25, -1.375,
    // -1.1875 when smoothed (steepest at 2) and -2, -1.5, -1 raw (steepest at 1).
    const int64_t steepest = smooth_f == 0.5 ? 2 : 1;
    EXPECT_EQ(finder->suggestion_index(), steepest);
    EXPECT_EQ(finder->lr_suggestion(), r.lr[steepest]);
  }
}

TEST(FastaiLRFinderTest, LengthensARunShorterThanNumIter) {
  ScriptedTrainer t({1.0});
  auto finder = std::make_shared<kh::FastaiLRFinder>();
  {
    auto attached = finder->attach(t.trainer, {}, t.optimizer, FinderOptions().num_iter(10).diverge_th(kNoDivergence));
    t.trainer.run(std::vector<int>(4, 0), 1);  // 4 iterations asked; the test needs 10
    EXPECT_EQ(t.trainer.state().iteration, 10);
    EXPECT_EQ(t.trainer.state().max_epochs.value_or(0), 3);
  }
  EXPECT_EQ(t.seen_lr.size(), 10u);
  // Without num_iter: the whole run.
  t.seen_lr.clear();
  {
    auto attached = finder->attach(t.trainer, {}, t.optimizer, FinderOptions().diverge_th(kNoDivergence));
    t.trainer.run(std::vector<int>(4, 0), 2);
  }
  EXPECT_EQ(finder->get_results().loss.size(), 8u);
  EXPECT_EQ(t.seen_lr.front(), 0.5);  // start_lr unset: the optimizer's lr
  EXPECT_DOUBLE_EQ(t.seen_lr.back(), 10.0);
}

TEST(FastaiLRFinderTest, RegressionFallsThenDivergesAndEverythingIsRestoredBitwise) {
  RegressionTrainer t(3.0, 1);
  t.trainer.run(std::vector<int>(3, 0), 1);  // momentum buffers exist now
  std::vector<at::Tensor> params_before;
  for (const auto& p : t.model->parameters()) params_before.push_back(p.detach().clone());
  const std::vector<at::Tensor> buffers_before = momentum_buffers(*t.optimizer);
  ASSERT_EQ(buffers_before.size(), 2u);
  const auto trainer_before = t.trainer.state_dict();
  const int64_t iterations_before = t.iterations;

  auto finder = std::make_shared<kh::FastaiLRFinder>();
  {
    auto attached = finder->attach(t.trainer, {{"model", kh::stateful(t.model)}}, *t.optimizer,
                                   FinderOptions().start_lr({1e-3}).num_iter(100));
    t.trainer.run(std::vector<int>(100, 0), 1);
  }
  const auto& r = finder->get_results();
  EXPECT_TRUE(finder->diverged());
  EXPECT_LT(r.loss.size(), 100u);  // stopped on divergence before num_iter
  EXPECT_EQ(static_cast<int64_t>(r.loss.size()), t.iterations - iterations_before);
  std::size_t lowest = 0;
  for (std::size_t i = 0; i < r.loss.size(); ++i) lowest = r.loss[i] < r.loss[lowest] ? i : lowest;
  EXPECT_GT(lowest, 10u);  // the loss first falls ...
  EXPECT_LT(r.loss[lowest], r.loss[0] / 2);
  EXPECT_GT(r.loss.back(), 5 * r.loss[lowest]);  // ... then diverges
  const int64_t k = finder->suggestion_index();
  EXPECT_GT(k, 0);
  EXPECT_LT(k, static_cast<int64_t>(lowest));  // inside the falling part
  EXPECT_LT(r.loss[k + 1], r.loss[k - 1]);

  // Restored bit for bit: parameters, momentum buffers, lr, trainer.
  const auto params = t.model->parameters();
  const std::vector<at::Tensor> buffers = momentum_buffers(*t.optimizer);
  ASSERT_EQ(buffers.size(), 2u);
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(at::equal(params[i], params_before[i])) << i;
    EXPECT_TRUE(at::equal(buffers[i], buffers_before[i])) << i;
  }
  EXPECT_EQ(optimizer_lr(*t.optimizer), 0.01);
  EXPECT_EQ(c10::IValue(t.trainer.state_dict()), c10::IValue(trainer_before));
  EXPECT_FALSE(t.trainer.has_event_handler(Events::ITERATION_STARTED));

  finder->apply_suggested_lr(*t.optimizer);
  EXPECT_EQ(optimizer_lr(*t.optimizer), r.lr[k][0]);
  // The trainer goes on from its restored state (its finished 1-epoch run of 3 iterations), as
  // it would have without the finder: epoch 2 is iterations 4 to 6.
  t.trainer.run(std::vector<int>(3, 0), 2);
  EXPECT_EQ(t.trainer.state().epoch, 2);
  EXPECT_EQ(t.trainer.state().iteration, 6);
}

TEST(FastaiLRFinderTest, AFreshOptimizerGetsNoStateBack) {
  RegressionTrainer t(3.0, 1);
  auto finder = std::make_shared<kh::FastaiLRFinder>();
  const at::Tensor weight_before = t.model->weight.detach().clone();
  {
    auto attached = finder->attach(t.trainer, {{"model", kh::stateful(t.model)}}, *t.optimizer,
                                   FinderOptions().num_iter(5).diverge_th(kNoDivergence));
    t.trainer.run(std::vector<int>(5, 0), 1);
    EXPECT_FALSE(t.optimizer->state().empty());
    attached.detach();
    attached.detach();  // a no-op
    EXPECT_NE(error_of<UsageError>([&] { attached.trainer(); }).find("after detach()"), std::string::npos);
  }
  EXPECT_TRUE(t.optimizer->state().empty());
  EXPECT_TRUE(at::equal(t.model->weight, weight_before));
}

TEST(FastaiLRFinderTest, MisuseErrors) {
  ScriptedTrainer t({1.0});
  auto finder = std::make_shared<kh::FastaiLRFinder>();
  auto attach_error = [&](const FinderOptions& o) {
    return error_of<UsageError>([&] { auto attached = finder->attach(t.trainer, {}, t.optimizer, o); });
  };
  EXPECT_NE(attach_error(FinderOptions().smooth_f(1.0)).find("smooth_f is outside the range [0, 1): 1"),
            std::string::npos);
  EXPECT_NE(attach_error(FinderOptions().diverge_th(0.5)).find("diverge_th should be larger than 1, got 0.5"),
            std::string::npos);
  EXPECT_NE(
      attach_error(FinderOptions().step_mode("abc")).find("step_mode should be 'exp' or 'linear', but given 'abc'"),
      std::string::npos);
  EXPECT_NE(attach_error(FinderOptions().num_iter(0)).find("num_iter should be positive, but given 0"),
            std::string::npos);
  EXPECT_NE(attach_error(FinderOptions().start_lr({10}).end_lr({1})).find("start_lr must be less than end_lr"),
            std::string::npos);
  EXPECT_NE(attach_error(FinderOptions().start_lr({0.1, 0.2})).find("start_lr should hold one value, or one per"),
            std::string::npos);
  EXPECT_NE(attach_error(FinderOptions().start_lr({0})).find("start_lr should be > 0 with step_mode 'exp'"),
            std::string::npos);
  EXPECT_FALSE(t.trainer.has_event_handler(Events::STARTED));  // the failed attaches added nothing

  kh::FastaiLRFinder local;
  EXPECT_NE(error_of<UsageError>([&] {
              auto a = local.attach(t.trainer, {}, t.optimizer);
            }).find("kindling::handlers::FastaiLRFinder.attach: the object must be owned by a std::shared_ptr"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] { finder->lr_suggestion(); }).find("didn't run yet"), std::string::npos);
  {
    auto attached = finder->attach(t.trainer, {}, t.optimizer, FinderOptions().num_iter(4));
    EXPECT_NE(
        error_of<UsageError>([&] { auto again = finder->attach(t.trainer, {}, t.optimizer); }).find("already attached"),
        std::string::npos);
    t.trainer.run(std::vector<int>(4, 0), 1);  // a flat loss: no falling part
  }
  EXPECT_NE(error_of<UsageError>([&] { finder->lr_suggestion(); }).find("unexpected curve shape"), std::string::npos);

  // An output that is not a loss.
  Engine tuple_trainer([](Engine&, const int&) -> Value { return Value::tuple({at::zeros({2}), at::zeros({2})}); });
  {
    auto attached = finder->attach(tuple_trainer, {}, t.optimizer);
    EXPECT_NE(error_of<UsageError>([&] {
                tuple_trainer.run(std::vector<int>(3, 0), 1);
              }).find("pass FastaiLRFinderOptions().output_transform(...) that returns the loss"),
              std::string::npos);
  }
  // apply_suggested_lr to an optimizer with another number of groups.
  ScriptedTrainer falling({10, 8, 6, 5, 4, 30});
  {
    auto attached = finder->attach(falling.trainer, {}, falling.optimizer, FinderOptions().smooth_f(0));
    falling.trainer.run(std::vector<int>(10, 0), 1);
  }
  at::Tensor a = at::zeros({1}).requires_grad_(true), b = at::zeros({1}).requires_grad_(true);
  torch::optim::SGD two_groups({torch::optim::OptimizerParamGroup({a}), torch::optim::OptimizerParamGroup({b})},
                               torch::optim::SGDOptions(0.1));
  EXPECT_NE(error_of<UsageError>([&] {
              finder->apply_suggested_lr(two_groups);
            }).find("the number of parameter groups does not match"),
            std::string::npos);
}

// ---- 2 ranks, different data ----------------------------------------------------------------

KINDLING_WORKER(lr_finder_on_two_ranks) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int rank = kd::get_rank();
  RegressionTrainer t(3.0 + 2.0 * rank, 1 + static_cast<uint64_t>(rank));  // each rank its own data
  auto finder = std::make_shared<kh::FastaiLRFinder>();
  {
    auto attached = finder->attach(t.trainer, {{"model", kh::stateful(t.model)}}, *t.optimizer,
                                   FinderOptions().start_lr({1e-3}).num_iter(100));
    t.trainer.run(std::vector<int>(100, 0), 1);
  }
  const auto& r = finder->get_results();
  std::printf("FINDER iterations=%lld diverged=%d index=%lld lr=%.17g last=%.17g\n",
              static_cast<long long>(t.iterations), finder->diverged() ? 1 : 0,
              static_cast<long long>(finder->suggestion_index()), finder->lr_suggestion()[0], r.loss.back());
  std::fflush(stdout);
  kd::finalize();
}

TEST(FastaiLRFinderTest, RanksWithDifferentDataStopTogetherWithOneSuggestion) {
  kindling::testing::LaunchOptions opts;
  opts.world_size = 2;
  const auto results = kindling::testing::run_workers("lr_finder_on_two_ranks", opts);
  std::vector<std::string> lines;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << kindling::testing::describe(results);
    std::istringstream out(r.out);
    std::string line;
    while (std::getline(out, line)) {
      if (line.rfind("FINDER ", 0) == 0) lines.push_back(line);
    }
  }
  ASSERT_EQ(lines.size(), 2u) << kindling::testing::describe(results);
  EXPECT_EQ(lines[0], lines[1]);  // same iteration, decision, suggestion and averaged loss
  EXPECT_NE(lines[0].find("diverged=1"), std::string::npos) << lines[0];
  long long iterations = 0;
  ASSERT_EQ(std::sscanf(lines[0].c_str(), "FINDER iterations=%lld", &iterations), 1);
  EXPECT_LT(iterations, 100);
}

}  // namespace
