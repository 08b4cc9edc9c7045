// The ranking metrics and ignite's four ranking compute functions (roc_auc_compute_fn,
// roc_auc_curve_compute_fn, average_precision_compute_fn, precision_recall_curve_compute_fn:
// kindling/metrics/roc_auc.h and average_precision.h) against the real ignite 0.5.5 and the
// scikit-learn it calls, on the same batches (tests/metrics/ignite_cases.py, where the build's
// Python has them: the LibTorch 2.15 venv). ignite's ROC_AUC, RocCurve, AveragePrecision and
// PrecisionRecallCurve are EpochMetrics over exactly those functions, so kindling's EpochMetric
// over its functions must give the same values; kindling's own classes are compared where they
// promise ignite's values (RocCurve keeps every threshold, so it is not). ranking_test.cpp
// checks the classes against an independent torch reference and by hand.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/average_precision.h"
#include "kindling/metrics/epoch_metric.h"
#include "kindling/metrics/roc_auc.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace ranking_ignite_test {

using Batch = kindling::testing::MetricBatch;
using kindling::testing::batches_of;

// Scores on a coarse grid (many ties, and straight runs of the ROC curve for drop_intermediate
// to remove) with targets that follow them loosely.
std::vector<Batch> binary_batches(uint64_t seed) {
  return batches_of(seed, [](at::Generator& g, int64_t n) {
    const at::Tensor y = (at::rand({n}, g) > 0.45).to(at::kLong);
    const at::Tensor score = (at::rand({n}, g) * 6 + 3 * y.to(at::kFloat)).floor() / 9;
    return Batch{score.to(at::kFloat), y};
  });
}

std::shared_ptr<km::Metric> of(km::EpochMetric::ComputeFunction fn) {
  return std::make_shared<km::EpochMetric>(std::move(fn), km::OutputTransform(), /*check_compute_fn=*/false);
}

std::vector<kindling::testing::IgniteCase> cases() {
  const auto binary = binary_batches(21), ties = binary_batches(22);
  const auto multilabel = batches_of(23, [](at::Generator& g, int64_t n) {
    const at::Tensor y = (at::rand({n, 3}, g) > 0.5).to(at::kLong);
    return Batch{(at::rand({n, 3}, g) + 0.6 * y.to(at::kFloat)).to(at::kDouble), y};
  });
  return {
      {"auc_fn", "ROC_AUC", "{}", binary, [] { return of(km::roc_auc_compute_fn); }},
      {"auc_fn_multilabel", "ROC_AUC", "{}", multilabel, [] { return of(km::roc_auc_compute_fn); }},
      {"auc_class", "ROC_AUC", "{}", ties, [] { return std::make_shared<km::ROC_AUC>(); }},
      {"roc_fn", "RocCurve", "{}", binary, [] { return of(km::roc_auc_curve_compute_fn); }},
      {"roc_fn_ties", "RocCurve", "{}", ties, [] { return of(km::roc_auc_curve_compute_fn); }},
      {"ap_fn", "AveragePrecision", "{}", binary, [] { return of(km::average_precision_compute_fn); }},
      {"ap_fn_multilabel", "AveragePrecision", "{}", multilabel, [] { return of(km::average_precision_compute_fn); }},
      {"ap_class", "AveragePrecision", "{}", ties, [] { return std::make_shared<km::AveragePrecision>(); }},
      {"pr_fn", "PrecisionRecallCurve", "{}", binary, [] { return of(km::precision_recall_curve_compute_fn); }},
      {"pr_class", "PrecisionRecallCurve", "{}", ties, [] { return std::make_shared<km::PrecisionRecallCurve>(); }},
  };
}

TEST(RankingIgniteTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(cases()); }

// drop_intermediate by hand: scores 0.9, 0.8, 0.7, 0.6 with targets 1, 1, 1, 0. The points
// (fps, tps) are (0,1), (0,2), (0,3), (1,3): (0,2) lies between (0,1) and (0,3) and goes; the
// others bend or end the curve and stay.
TEST(RankingIgniteTest, RocCurveFunctionDropsCollinearPointsAsScikitLearn) {
  const at::Tensor scores = at::tensor({0.9, 0.8, 0.7, 0.6}, at::kDouble);
  const at::Tensor y = at::tensor({1, 1, 1, 0}, at::kLong);
  const Value kept = km::roc_auc_curve_compute_fn(scores, y);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(at::equal(kept[0], at::tensor({0.0, 0.0, 0.0, 1.0}, at::kDouble))) << kept[0];
  EXPECT_TRUE(at::allclose(kept[1], at::tensor({0.0, 1.0 / 3, 1.0, 1.0}, at::kDouble))) << kept[1];
  EXPECT_TRUE(at::equal(kept[2], at::tensor({inf, 0.9, 0.7, 0.6}, at::kDouble))) << kept[2];
  // The class keeps every threshold: 5 points.
  auto curve = std::make_shared<km::RocCurve>();
  curve->update(Value{scores, y});
  EXPECT_EQ(curve->compute()[2].size(0), 5);
}

TEST(RankingIgniteTest, FunctionsNameThemselvesInTheirErrors) {
  const at::Tensor scores = at::tensor({0.1, 0.4, 0.35}, at::kDouble);
  const std::string one_class = error_of([&] { km::roc_auc_compute_fn(scores, at::ones({3}, at::kLong)); });
  EXPECT_NE(one_class.find("roc_auc_compute_fn"), std::string::npos) << one_class;
  EXPECT_NE(one_class.find("only one class"), std::string::npos) << one_class;
  const std::string bad_target = error_of([&] { km::average_precision_compute_fn(scores, at::full({3}, 2)); });
  EXPECT_NE(bad_target.find("average_precision_compute_fn"), std::string::npos) << bad_target;
  const std::string two_d = error_of([&] { km::precision_recall_curve_compute_fn(at::rand({3, 2}), at::zeros({3})); });
  EXPECT_NE(two_d.find("precision_recall_curve_compute_fn"), std::string::npos) << two_d;
}

}  // namespace ranking_ignite_test
