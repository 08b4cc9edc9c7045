// TerminateOnNan, EarlyStopping (ignite's rules) and Timer.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "kindling/handlers/stopping.h"
#include "kindling/handlers/profilers/timer.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

TEST(TerminateOnNanTest, StopsAtTheFirstNonFiniteOutput) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> outputs{1.0, 2.0, nan, 4.0};
  Engine engine([](Engine&, const double& b) -> Value { return b; });
  engine.on(Events::ITERATION_COMPLETED, kh::TerminateOnNan());
  engine.run(outputs, 1);
  EXPECT_EQ(engine.state().iteration, 3);

  std::vector<int> steps{1, 2, 3};
  Engine tensors([](Engine&, const int& b) -> Value {
    return {at::ones({2}), b == 2 ? at::full({2}, std::numeric_limits<float>::infinity()) : at::zeros({2})};
  });
  tensors.on(Events::ITERATION_COMPLETED, kh::TerminateOnNan());
  tensors.run(steps, 1);
  EXPECT_EQ(tensors.state().iteration, 2);
}

// kindling's mark: code after run() tells a run TerminateOnNan ended from one that completed.
TEST(TerminateOnNanTest, MarksTheRunItEnds) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> finite{1.0, 2.0}, broken{1.0, nan, 3.0};
  Engine completed([](Engine&, const double& b) -> Value { return b; });
  completed.on(Events::ITERATION_COMPLETED, kh::TerminateOnNan());
  completed.run(finite, 1);
  EXPECT_EQ(kh::TerminateOnNan::ended_at(completed), std::nullopt);
  Engine ended([](Engine&, const double& b) -> Value { return b; });
  ended.on(Events::ITERATION_COMPLETED, kh::TerminateOnNan());
  ended.run(broken, 1);
  EXPECT_EQ(kh::TerminateOnNan::ended_at(ended), 2);
  EXPECT_EQ(ended.state().attributes.at(kh::TerminateOnNan::kStateKey).number(), 2.0);
}

TEST(EarlyStoppingTest, PatienceMinDeltaAndCumulativeDelta) {
  auto run = [](std::vector<double> scores, int patience, double min_delta, bool cumulative) {
    std::vector<int> data(scores.size(), 0);
    std::size_t call = 0;
    Engine trainer([](Engine&, const int& b) -> Value { return b; });
    kh::EarlyStopping stopper(
        patience, [&](Engine&) { return scores[call++]; }, trainer, min_delta, cumulative);
    trainer.on(Events::ITERATION_COMPLETED, [&](Engine& e) { stopper(e); });
    trainer.run(data, 1);
    return trainer.state().iteration;
  };
  EXPECT_EQ(run({0.5, 0.6, 0.6, 0.59, 0.7, 0.8}, 2, 0.0, false), 4);  // two calls without improvement
  EXPECT_EQ(run({0.5, 0.6, 0.61, 0.7, 0.8, 0.9}, 2, 0.0, false), 6);  // keeps improving
  // min_delta 0.05: +0.01 steps do not count as improvements.
  EXPECT_EQ(run({0.5, 0.51, 0.52, 0.53, 0.54, 0.55}, 3, 0.05, false), 4);
  // Without cumulative_delta the best follows each small gain, so 0.56 never beats best + 0.05;
  // with it the best stays 0.5 and 0.56 counts as an improvement.
  EXPECT_EQ(run({0.5, 0.52, 0.54, 0.56, 0.57, 0.58}, 3, 0.05, false), 4);
  EXPECT_EQ(run({0.5, 0.52, 0.54, 0.56, 0.57, 0.58}, 3, 0.05, true), 6);

  Engine trainer([](Engine&, const int& b) -> Value { return b; });
  auto score = [](Engine&) { return 1.0; };
  EXPECT_THROW(kh::EarlyStopping(0, score, trainer), kindling::UsageError);
  EXPECT_THROW(kh::EarlyStopping(1, score, trainer, -0.1), kindling::UsageError);
  kh::EarlyStopping a(3, score, trainer);
  a(trainer);
  a(trainer);
  kh::EarlyStopping b(3, score, trainer);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.counter(), 1);
  EXPECT_EQ(b.best_score(), 1.0);
}

TEST(TimerTest, PausedTimeDoesNotCountAndAveragesPerStep) {
  kh::Timer timer(/*average=*/true);
  timer.pause();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LT(timer.value(), 0.1);
  timer.resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  timer.step();
  timer.step();
  EXPECT_GE(timer.value(), 0.03);  // >= 60 ms over 2 steps
  EXPECT_LT(timer.value(), 0.2);

  std::vector<int> data{1, 2, 3};
  Engine engine([](Engine&, const int& b) -> Value {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return b;
  });
  auto per_iteration = std::make_shared<kh::Timer>(true);
  per_iteration->attach(engine, Events::EPOCH_STARTED, Events::EPOCH_COMPLETED, Events::ITERATION_STARTED,
                        Events::ITERATION_COMPLETED);
  engine.run(data, 1);
  EXPECT_FALSE(per_iteration->running());
  EXPECT_GE(per_iteration->value(), 0.019);
  kh::Timer on_stack;
  EXPECT_THROW(on_stack.attach(engine), kindling::UsageError) << "the engine could not keep it alive";
}

}  // namespace
