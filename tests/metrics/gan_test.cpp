// FID and InceptionScore (kindling/metrics/gan.h): equal to the real ignite 0.5.5 on the same
// features (tests/metrics/ignite_cases.py, where the build's Python has it: the LibTorch 2.15
// venv), to values worked by hand, with a feature extractor, and misuse refused with what was
// given. Across ranks (1, 2 and 3 with an empty shard, gloo and mpi): distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "kindling/metrics/gan.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace gan_test {

using kindling::testing::batches_of;
using Batch = kindling::testing::MetricBatch;

TEST(GanMetricsTest, EqualIgnite055) {
  const auto features = batches_of(81, [](at::Generator& g, int64_t n) {
    return Batch{at::randn({n, 4}, g, at::kDouble), at::randn({n, 4}, g, at::kDouble) * 1.3 + 0.5};
  });
  const auto probabilities = batches_of(82, [](at::Generator& g, int64_t n) {
    return Batch{at::softmax(at::randn({n, 5}, g, at::kDouble) * 2, 1), at::zeros({n}, at::kLong)};
  });
  kindling::testing::expect_ignite_values({
      {"fid", "FID", R"({"num_features": 4})", features, [] { return std::make_shared<km::FID>(4); }},
      {"inception_score", "InceptionScore", R"({"num_features": 5})", probabilities,
       [] { return std::make_shared<km::InceptionScore>(5); }, "y_pred"},
  });
}

TEST(GanMetricsTest, ValuesWorkedByHandAndThroughAnExtractor) {
  const at::Tensor a = at::tensor({1.0, 2.0, 4.0, 7.0}, at::kDouble).unsqueeze(1);
  const at::Tensor b = at::tensor({0.0, 3.0, 3.0, 6.0}, at::kDouble).unsqueeze(1);
  km::FID one(1);
  one.update(Value::tuple({a, b}));
  // 1 feature: (mu_a - mu_b)^2 + var_a + var_b - 2 sqrt(var_a var_b), unbiased variances.
  const double var_a = (a - a.mean()).pow(2).sum().item<double>() / 3,
               var_b = (b - b.mean()).pow(2).sum().item<double>() / 3;
  const double mu = a.mean().item<double>() - b.mean().item<double>();
  EXPECT_NEAR(one.compute().number(), mu * mu + var_a + var_b - 2 * std::sqrt(var_a * var_b), 1e-12);
  km::FID same(3);
  const at::Tensor x = at::randn({20, 3}, at::kDouble);
  same.update(Value::tuple({x, x}));
  EXPECT_NEAR(same.compute().number(), 0.0, 1e-9);
  // The extractor's features are what is measured: doubling there equals doubling the inputs.
  km::FID doubled(3, [](const at::Tensor& t) { return t * 2; });
  km::FID plain(3);
  const at::Tensor y = at::randn({20, 3}, at::kDouble) + 1;
  doubled.update(Value::tuple({x, y}));
  plain.update(Value::tuple({x * 2, y * 2}));
  EXPECT_NEAR(doubled.compute().number(), plain.compute().number(), 1e-9);
  // Uniform predictions: every p(y|x) equals p(y), score 1; one-hot over 4 equally used classes: 4.
  km::InceptionScore uniform(4);
  uniform.update(Value(at::full({6, 4}, 0.25, at::kDouble)));
  EXPECT_NEAR(uniform.compute().number(), 1.0, 1e-9);
  km::InceptionScore sharp(4, [](const at::Tensor& labels) { return at::one_hot(labels, 4).to(at::kDouble); });
  sharp.update(Value(at::tensor({0, 1, 2, 3, 0, 1, 2, 3}, at::kLong)));
  EXPECT_NEAR(sharp.compute().number(), 4.0, 1e-9);
}

TEST(GanMetricsTest, MisuseIsRefusedWithWhatWasGiven) {
  EXPECT_NE(error_of([] { km::FID fid(0); }).find("num_features must be at least 1, got 0"), std::string::npos);
  km::FID fid(4);
  EXPECT_NE(error_of([&] {
              fid.update(Value::tuple({at::zeros({2, 3}), at::zeros({2, 3})}));
            }).find("num_features is 4 but the features have 3 columns ([2, 3])"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              fid.update(Value::tuple({at::zeros({2, 4}), at::zeros({3, 4})}));
            }).find("features of [2, 4] and [3, 4]"),
            std::string::npos);
  fid.update(Value::tuple({at::zeros({1, 4}), at::zeros({1, 4})}));
  EXPECT_NE(
      error_of<km::NotComputableError>([&] { fid.compute(); }).find("needs at least 2 samples (a covariance), got 1"),
      std::string::npos);
  km::InceptionScore score(3);
  EXPECT_NE(
      error_of([&] { score.update(Value(at::zeros({4}))); }).find("must have 2 dimensions (N, num_features), got [4]"),
      std::string::npos);
  EXPECT_NE(error_of<km::NotComputableError>([&] { score.compute(); }).find("at least one example"), std::string::npos);
}

// ignite 0.5.5's FID raises scipy's ValueError "array must not contain infs or NaNs" for a NaN
// or inf feature: kindling refuses it by name (LibTorch's eigh saw NaN before).
TEST(GanMetricsTest, FIDRefusesNonFiniteFeaturesAsIgnite) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    km::FID fid(3);
    at::Tensor real = at::arange(18, at::kDouble).reshape({6, 3}).sin();
    real[2][1] = bad;
    fid.update(Value::tuple({real, real.cos()}));
    EXPECT_NE(error_of<kindling::UsageError>([&] { fid.compute(); }).find("FID: the features hold NaN or inf"),
              std::string::npos)
        << bad;
  }
}

}  // namespace gan_test
