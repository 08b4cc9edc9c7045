// The regression metrics over every sample (kindling/metrics/regression_epoch.h): equal to the
// real ignite 0.5.5 (and the scipy its rank correlations call) on the same batches
// (tests/metrics/ignite_regression.py, where the build's Python has them: the LibTorch 2.15
// venv), to values worked by hand, and they refuse misuse with what they were given. Across
// ranks (1, 2 and 3 with an empty shard, gloo and mpi): distributed_metrics_test.cpp; saved and
// resumed at another world size: metric_state_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/regression_epoch.h"
#include "metrics/ignite_regression.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace regression_epoch_test {

using Factory = std::function<std::shared_ptr<km::Metric>()>;
using Kendall = km::KendallRankCorrelation;

// Every metric of the header by ignite_regression.py's name.
std::map<std::string, Factory> every_metric() {
  return {
      {"MedianAbsoluteError", [] { return std::make_shared<km::MedianAbsoluteError>(); }},
      {"MedianAbsolutePercentageError", [] { return std::make_shared<km::MedianAbsolutePercentageError>(); }},
      {"MedianRelativeAbsoluteError", [] { return std::make_shared<km::MedianRelativeAbsoluteError>(); }},
      {"GeometricMeanRelativeAbsoluteError", [] { return std::make_shared<km::GeometricMeanRelativeAbsoluteError>(); }},
      {"SpearmanRankCorrelation", [] { return std::make_shared<km::SpearmanRankCorrelation>(); }},
      {"KendallRankCorrelation:b", [] { return std::make_shared<Kendall>(Kendall::Variant::kB); }},
      {"KendallRankCorrelation:c", [] { return std::make_shared<Kendall>(Kendall::Variant::kC); }},
  };
}

// Batch b of a fixed data set with many ties: targets in [1, 5] in steps of 1/2, predictions off
// by -0.15 to 1.35 in steps of 1/4 (never exact: the geometric mean would be 0). 8 batches of 3
// to 6 samples: 36 in all, an even count (the medians take the mean of the middle two).
kindling::testing::RegressionBatch tied_batch(int64_t b) {
  const int64_t n = 3 + b % 4;
  std::vector<float> pred, target;
  for (int64_t k = 0; k < n; ++k) {
    const double i = static_cast<double>(10 * b + k);
    const double y = 1 + std::round(4 * (1 + std::sin(0.7 * i))) / 2;
    target.push_back(static_cast<float>(y));
    pred.push_back(static_cast<float>(y + 0.6 + 0.25 * std::round(3 * std::cos(1.3 * i))));
  }
  return {at::tensor(pred), at::tensor(target)};
}

TEST(RegressionEpochTest, EqualIgnite055OnTheSameBatches) {
  std::vector<kindling::testing::RegressionBatch> data;
  for (int64_t b = 0; b < 8; ++b) data.push_back(tied_batch(b));
  std::vector<std::string> names;
  for (const auto& entry : every_metric()) names.push_back(entry.first);
  std::map<std::string, double> ignite;
  std::string skip, error;
  if (!kindling::testing::ignite_regression(data, names, ignite, skip, error)) {
    if (!skip.empty()) GTEST_SKIP() << skip;
    FAIL() << error;
  }
  for (const auto& [name, make] : every_metric()) {
    auto metric = make();
    for (const auto& [pred, target] : data) metric->update(Value::tuple({pred, target}));
    const double got = metric->compute().number(), want = ignite.at(name);
    EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << name;
  }
}

TEST(RegressionEpochTest, ValuesWorkedByHand) {
  // y_pred = (2, 2, 3, 7), y = (1, 2, 4, 5): |errors| (1, 0, 1, 2); mean y = 3, |y - 3| = (2, 1, 1, 2).
  const Value batch = Value::tuple({at::tensor({2.0, 2.0, 3.0, 7.0}), at::tensor({1.0, 2.0, 4.0, 5.0})});
  const std::map<std::string, double> want{
      {"MedianAbsoluteError", 1.0},                    // sorted 0 1 1 2
      {"MedianAbsolutePercentageError", 100 * 0.325},  // 1, 0, 0.25, 0.4 -> (0.25 + 0.4) / 2
      {"MedianRelativeAbsoluteError", 0.75},           // 0.5, 0, 1, 1 -> (0.5 + 1) / 2
      // ranks of y_pred (1.5, 1.5, 3, 4) and y (1, 2, 3, 4): sum of products of deviations 4.5,
      // of squares 4.5 and 5.
      {"SpearmanRankCorrelation", 4.5 / std::sqrt(4.5 * 5)},
      // 6 pairs: 5 concordant, 0 discordant, 1 tied in y_pred only: tau-b 5 / sqrt(5 * 6);
      // tau-c: 2 * 5 / (16 * (3 - 1) / 3) with 3 distinct predictions.
      {"KendallRankCorrelation:b", 5 / std::sqrt(30.0)},
      {"KendallRankCorrelation:c", 10 / (16 * 2.0 / 3)},
  };
  for (const auto& [name, value] : want) {
    auto metric = every_metric().at(name)();
    metric->update(batch);
    EXPECT_NEAR(metric->compute().number(), value, 1e-12) << name;
  }
  // An exact prediction makes the geometric mean 0, as ignite's; else exp(mean(log)).
  km::GeometricMeanRelativeAbsoluteError gmrae;
  gmrae.update(batch);
  EXPECT_EQ(gmrae.compute().number(), 0.0);
  gmrae.reset();
  gmrae.update(Value::tuple({at::tensor({2.0, 5.0}), at::tensor({1.0, 3.0})}));  // 1/1 and 2/1
  EXPECT_NEAR(gmrae.compute().number(), std::sqrt(2.0), 1e-12);
  // An odd count: the middle value.
  km::MedianAbsoluteError mdae;
  mdae.update(Value::tuple({at::tensor({0.0, 0.0, 0.0}), at::tensor({3.0, -1.0, 2.0})}));
  EXPECT_NEAR(mdae.compute().number(), 2.0, 1e-12);
}

TEST(RegressionEpochTest, ConstantInputHasNoRankCorrelation) {
  for (const char* name : {"SpearmanRankCorrelation", "KendallRankCorrelation:b", "KendallRankCorrelation:c"}) {
    auto metric = every_metric().at(name)();
    metric->update(Value::tuple({at::tensor({1.0, 1.0, 1.0}), at::tensor({1.0, 2.0, 3.0})}));
    EXPECT_TRUE(std::isnan(metric->compute().number())) << name;  // scipy's NaN
    metric->reset();
    metric->update(Value::tuple({at::tensor({3.0, 2.0, 1.0}), at::tensor({1.0, 2.0, 3.0})}));
    EXPECT_NEAR(metric->compute().number(), -1.0, 1e-12) << name;
  }
}

TEST(RegressionEpochTest, MisuseIsRefusedWithWhatWasGivenAndStoresNothing) {
  for (const auto& [name, make] : every_metric()) {
    auto metric = make();
    EXPECT_NE(error_of<km::NotComputableError>([&] { metric->compute(); }).find("must have at least one example"),
              std::string::npos)
        << name;
    metric->update(Value::tuple({at::tensor({1.0, 2.0, 4.0}), at::tensor({1.5, 2.5, 3.0})}));
    const double before = metric->compute().number();
    const std::string ignite_name = name.substr(0, name.find(':'));
    EXPECT_NE(error_of([&] {
                metric->update(Value::tuple({at::ones({2, 2}), at::ones({2, 2})}));
              }).find(ignite_name + ": y_pred must have shape (N,) or (N, 1), but given [2, 2]"),
              std::string::npos)
        << name;
    EXPECT_NE(error_of([&] {
                metric->update(Value::tuple({at::ones({3}), at::ones({2})}));
              }).find("y_pred and y must have the same shape, but given [3] and [2]"),
              std::string::npos)
        << name;
    EXPECT_NE(error_of([&] {
                metric->update(Value::tuple({at::ones({2}, at::kLong), at::ones({2})}));
              }).find("y_pred must be floating point"),
              std::string::npos)
        << name;
    EXPECT_EQ(metric->compute().number(), before) << name;
  }
  km::MedianAbsolutePercentageError mdape;
  mdape.update(Value::tuple({at::tensor({1.0}), at::tensor({2.0})}));
  EXPECT_NE(error_of<km::NotComputableError>([&] {
              mdape.update(Value::tuple({at::tensor({1.0, 1.0, 1.0}), at::tensor({2.0, 0.0, 3.0})}));
            }).find("MedianAbsolutePercentageError: y is 0 at row 1 of this batch"),
            std::string::npos);
  EXPECT_NEAR(mdape.compute().number(), 50.0, 1e-12);  // the refused batch left nothing
}

TEST(RegressionEpochTest, KendallIsExactOnLargeInputWithTies) {
  // O(N log N) against the definition over every pair, on 2,000 samples with ties in both.
  at::Generator gen = at::detail::createCPUGenerator(7);
  const at::Tensor x = at::randint(40, {2000}, gen).to(at::kDouble);
  const at::Tensor y = at::floor((x + at::randint(25, {2000}, gen).to(at::kDouble)) / 2);
  const auto xs = x.accessor<double, 1>(), ys = y.accessor<double, 1>();
  int64_t concordant = 0, discordant = 0, x_tied = 0, y_tied = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    for (int64_t j = i + 1; j < 2000; ++j) {
      const double dx = xs[i] - xs[j], dy = ys[i] - ys[j];
      if (dx == 0) ++x_tied;
      if (dy == 0) ++y_tied;
      if (dx * dy > 0) ++concordant;
      if (dx * dy < 0) ++discordant;
    }
  }
  const double pairs = 2000.0 * 1999 / 2;
  const double want = static_cast<double>(concordant - discordant) / std::sqrt((pairs - x_tied) * (pairs - y_tied));
  Kendall tau;
  tau.update(Value::tuple({x, y}));
  EXPECT_NEAR(tau.compute().number(), want, 1e-12);
}

}  // namespace regression_epoch_test
