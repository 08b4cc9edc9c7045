// The sum-based regression metrics (kindling/metrics/regression_sums.h): equal to the real
// ignite 0.5.5 on the same batches (tests/metrics/ignite_regression.py, where the build's
// Python has it: the LibTorch 2.15 venv), to values worked by hand, and they refuse misuse
// with what they were given. Across ranks (1, 2 and 3 with an empty shard, gloo and mpi):
// distributed_metrics_test.cpp; saved and resumed at another world size: metric_state_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/regression_sums.h"
#include "metrics/ignite_regression.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace regression_sums_test {

using Factory = std::function<std::shared_ptr<km::Metric>()>;

// Every metric of the header by ignite's name.
std::map<std::string, Factory> every_metric() {
  return {
      {"CanberraMetric", [] { return std::make_shared<km::CanberraMetric>(); }},
      {"FractionalAbsoluteError", [] { return std::make_shared<km::FractionalAbsoluteError>(); }},
      {"FractionalBias", [] { return std::make_shared<km::FractionalBias>(); }},
      {"GeometricMeanAbsoluteError", [] { return std::make_shared<km::GeometricMeanAbsoluteError>(); }},
      {"ManhattanDistance", [] { return std::make_shared<km::ManhattanDistance>(); }},
      {"MaximumAbsoluteError", [] { return std::make_shared<km::MaximumAbsoluteError>(); }},
      {"MeanAbsoluteRelativeError", [] { return std::make_shared<km::MeanAbsoluteRelativeError>(); }},
      {"MeanError", [] { return std::make_shared<km::MeanError>(); }},
      {"MeanNormalizedBias", [] { return std::make_shared<km::MeanNormalizedBias>(); }},
      {"WaveHedgesDistance", [] { return std::make_shared<km::WaveHedgesDistance>(); }},
      {"R2Score", [] { return std::make_shared<km::R2Score>(); }},
      {"PearsonCorrelation", [] { return std::make_shared<km::PearsonCorrelation>(); }},
  };
}

// Batch b of a fixed data set: targets spread over [1, 10] (no zero: the relative errors
// divide by them; a spread large against the mean, so that float32 sums, as ignite keeps
// them, lose little in R2's and Pearson's differences), predictions off by up to 0.8 around a
// bias of 0.6 (the signed means, MeanError's, FractionalBias's and MeanNormalizedBias's, stay
// far from 0: near 0, ignite's float32 sums would not hold 1e-6 of them; with a bias of 0.1,
// MeanNormalizedBias was -0.0014468640 in ignite and -0.0014468585 in float64).
kindling::testing::RegressionBatch regression_batch(int64_t b) {
  const int64_t n = 3 + b % 4;
  std::vector<float> pred, target;
  for (int64_t k = 0; k < n; ++k) {
    const double i = static_cast<double>(10 * b + k);
    const double y = 5.5 + 4.5 * std::sin(0.7 * i);
    target.push_back(static_cast<float>(y));
    pred.push_back(static_cast<float>(y + 0.8 * std::cos(1.3 * i) + 0.6));
  }
  return {at::tensor(pred), at::tensor(target)};
}

TEST(RegressionSumsTest, EqualIgnite055OnTheSameBatches) {
  constexpr int64_t kBatches = 9;
  std::vector<kindling::testing::RegressionBatch> data;
  for (int64_t b = 0; b < kBatches; ++b) data.push_back(regression_batch(b));
  const auto metrics = every_metric();
  std::vector<std::string> names;
  for (const auto& entry : metrics) names.push_back(entry.first);
  std::map<std::string, double> ignite;
  std::string skip, error;
  if (!kindling::testing::ignite_regression(data, names, ignite, skip, error)) {
    if (!skip.empty()) GTEST_SKIP() << skip;
    FAIL() << error;
  }
  for (const auto& [name, make] : metrics) {
    auto metric = make();
    for (const auto& [pred, target] : data) metric->update(Value::tuple({pred, target}));
    const double got = metric->compute().number(), want = ignite.at(name);
    // ignite keeps float32 sums (kindling float64): the 1e-6 relative.
    EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << name;
  }
}

TEST(RegressionSumsTest, ValuesWorkedByHand) {
  // y_pred = (2, 2, 3), y = (1, 2, 4): errors y - y_pred = (-1, 0, 1).
  const Value batch = Value::tuple({at::tensor({2.0, 2.0, 3.0}), at::tensor({1.0, 2.0, 4.0})});
  const std::map<std::string, double> want{
      {"CanberraMetric", 1.0 / 3 + 0 + 1.0 / 7},
      {"FractionalAbsoluteError", (2.0 / 3 + 0 + 2.0 / 7) / 3},
      {"FractionalBias", (-2.0 / 3 + 0 + 2.0 / 7) / 3},
      {"ManhattanDistance", 2.0},
      {"MaximumAbsoluteError", 1.0},
      {"MeanAbsoluteRelativeError", (1.0 + 0 + 0.25) / 3},
      {"MeanError", 0.0},
      {"MeanNormalizedBias", (-1.0 + 0 + 0.25) / 3},
      {"WaveHedgesDistance", 0.5 + 0 + 0.25},
      // mean y = 7/3; sum (y - mean)^2 = 14/3; sum of squared errors 2.
      {"R2Score", 1 - 2.0 / (14.0 / 3)},
      // Population moments: E[p y] = 6, E[p] = E[y] = 7/3, E[p^2] = 17/3, E[y^2] = 7.
      {"PearsonCorrelation", (6 - 49.0 / 9) / std::sqrt((17.0 / 3 - 49.0 / 9) * (7 - 49.0 / 9))},
  };
  for (const auto& [name, value] : want) {
    auto metric = every_metric().at(name)();
    metric->update(batch);
    EXPECT_NEAR(metric->compute().number(), value, 1e-12) << name;
  }
  // One exact prediction: log 0 makes the geometric mean 0, as ignite's.
  auto gmae = std::make_shared<km::GeometricMeanAbsoluteError>();
  gmae->update(batch);
  EXPECT_EQ(gmae->compute().number(), 0.0);
  gmae->reset();
  gmae->update(Value::tuple({at::tensor({3.0, 0.0}), at::tensor({1.0, 8.0})}));  // |errors| 2 and 8
  EXPECT_NEAR(gmae->compute().number(), 4.0, 1e-12);
}

TEST(RegressionSumsTest, BeforeAnyInputSumsAreZeroAndMeansNotComputable) {
  for (const auto& [name, make] : every_metric()) {
    auto metric = make();
    if (name == "CanberraMetric" || name == "ManhattanDistance" || name == "WaveHedgesDistance") {
      EXPECT_EQ(metric->compute().number(), 0.0) << name;
    } else {
      EXPECT_NE(error_of<km::NotComputableError>([&] { metric->compute(); }).find(name + " must have at least one"),
                std::string::npos)
          << name;
    }
  }
}

TEST(RegressionSumsTest, MisuseIsRefusedWithWhatWasGivenAndStoresNothing) {
  km::R2Score r2;
  r2.update(Value::tuple({at::tensor({1.0, 2.0}), at::tensor({1.5, 2.5})}));
  const double before = r2.compute().number();
  EXPECT_NE(error_of([&] {
              r2.update(Value::tuple({at::ones({2, 2}), at::ones({2, 2})}));
            }).find("R2Score: y_pred must have shape (N,) or (N, 1), but given [2, 2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              r2.update(Value::tuple({at::ones({3}), at::ones({2})}));
            }).find("y_pred and y must have the same shape, but given [3] and [2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              r2.update(Value::tuple({at::ones({2}, at::kLong), at::ones({2})}));
            }).find("y_pred must be floating point"),
            std::string::npos);
  EXPECT_EQ(r2.compute().number(), before);

  km::MeanAbsoluteRelativeError mare;
  mare.update(Value::tuple({at::tensor({1.0}), at::tensor({2.0})}));
  EXPECT_NE(error_of<km::NotComputableError>([&] {
              mare.update(Value::tuple({at::tensor({1.0, 1.0, 1.0}), at::tensor({2.0, 0.0, 3.0})}));
            }).find("MeanAbsoluteRelativeError: y is 0 at row 1 of this batch"),
            std::string::npos);
  EXPECT_NEAR(mare.compute().number(), 0.5, 1e-12);  // the refused batch left nothing
  // (N, 1) columns are taken as (N,).
  km::MeanError me;
  me.update(Value::tuple({at::tensor({1.0, 2.0}).unsqueeze(1), at::tensor({2.0, 4.0}).unsqueeze(1)}));
  EXPECT_NEAR(me.compute().number(), 1.5, 1e-12);
}

// As ignite 0.5.5: an empty batch is refused (ignite: torch's max() of an empty tensor), and a
// batch holding a NaN is skipped, so that only such batches leave nothing to compute. Across
// ranks, wherever that batch is: NonFiniteMetricsTest (distributed_metrics_test.cpp).
TEST(RegressionSumsTest, MaximumAbsoluteErrorRefusesEmptyBatchesAndSkipsNaNOnesAsIgnite) {
  km::MaximumAbsoluteError m;
  EXPECT_NE(error_of<kindling::UsageError>([&] {
              m.update(Value::tuple({at::zeros({0}, at::kDouble), at::zeros({0}, at::kDouble)}));
            }).find("MaximumAbsoluteError: a batch must hold at least one sample"),
            std::string::npos);
  m.update(Value::tuple({at::tensor({std::nan(""), 3.0}), at::zeros({2})}));
  EXPECT_NE(error_of<km::NotComputableError>([&] { m.compute(); }).find("must have at least one example"),
            std::string::npos);
  m.update(Value::tuple({at::tensor({0.5, 1.0}), at::zeros({2})}));
  EXPECT_EQ(m.compute().number(), 1.0);  // ignite 0.5.5: 1.0
}

}  // namespace regression_sums_test
