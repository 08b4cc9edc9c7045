// Frequency (kindling/metrics/frequency.h) on a real Engine: the rate it reports lies between the
// count over the time the process function slept (it cannot be faster) and the count over the
// time measured around it (it cannot be slower); misuse refused. Across ranks:
// distributed_metrics_test.cpp is not the place (a rate differs run to run): the reduction is
// the sum of counts over the mean of elapsed times, checked here at one rank by its formula.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/metrics/frequency.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace frequency_test {

constexpr double kTokens = 100, kSleep = 0.01;  // per iteration

TEST(FrequencyTest, RateLiesBetweenTheSleepBoundAndTheMeasuredOne) {
  Engine trainer([](Engine&, const int&) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kSleep));
    return Value(kTokens);
  });
  std::chrono::steady_clock::time_point start;
  trainer.on(Events::EPOCH_STARTED, [&](Engine&) { start = std::chrono::steady_clock::now(); });  // before the metric's
  std::make_shared<km::Frequency>()->attach(trainer, "tps");
  std::vector<double> rates, bounds;
  trainer.on(Events::ITERATION_COMPLETED, [&](Engine& e) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(e.state().metrics.at("tps").number());
    bounds.push_back(kTokens * static_cast<double>(e.state().iteration) / elapsed);
  });
  trainer.run(std::vector<int>(5, 0), 1);
  ASSERT_EQ(rates.size(), 5u);
  for (std::size_t i = 0; i < rates.size(); ++i) {
    EXPECT_LE(rates[i], kTokens / kSleep) << "iteration " << i + 1;  // no faster than the sleeps allow
    EXPECT_GE(rates[i], std::floor(bounds[i])) << "iteration " << i + 1;
  }
}

TEST(FrequencyTest, MisuseIsRefusedWithWhatWasGiven) {
  km::Frequency frequency;
  EXPECT_NE(error_of<km::NotComputableError>([&] { frequency.compute(); }).find("at least one update"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              frequency.update(Value::tuple({at::ones({2}), at::ones({2})}));
            }).find("Frequency: the (transformed) engine output must be a count"),
            std::string::npos);
}

}  // namespace frequency_test
