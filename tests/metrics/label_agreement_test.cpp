// CohenKappa, MatthewsCorrCoef (kindling/metrics/label_agreement.h) and MultiLabelConfusionMatrix
// (kindling/metrics/multilabel_confusion_matrix.h): equal to the real ignite 0.5.5 (and the
// scikit-learn its MatthewsCorrCoef calls) on the same batches (tests/metrics/ignite_cases.py,
// where the build's Python has them: the LibTorch 2.15 venv), to
// values worked by hand, and they refuse misuse with what they were given. Across ranks (1, 2
// and 3 with an empty shard, gloo and mpi): distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/label_agreement.h"
#include "kindling/metrics/multilabel_confusion_matrix.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace label_agreement_test {

std::vector<kindling::testing::IgniteCase> cases() {
  using W = km::KappaWeights;
  using kindling::testing::batches_of;
  using Batch = kindling::testing::MetricBatch;
  const auto labels = batches_of(11, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(5, {n}, g);
    // Mostly right, sometimes one class off, sometimes anything.
    const at::Tensor noise = at::randint(-1, 2, {n}, g) * (at::rand({n}, g) < 0.4).to(at::kLong);
    return Batch{(y + noise).clamp(0, 4), y};
  });
  const auto scores = batches_of(12, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(4, {n}, g);
    return Batch{at::randn({n, 4}, g) + 1.5 * at::one_hot(y, 4).to(at::kFloat), y};
  });
  const auto multilabel = batches_of(13, [](at::Generator& g, int64_t n) {
    const at::Tensor y = (at::rand({n, 3}, g) > 0.5).to(at::kLong);
    return Batch{at::where(at::rand({n, 3}, g) < 0.7, y, 1 - y), y};
  });
  return {
      {"kappa", "CohenKappa", "{}", labels, [] { return std::make_shared<km::CohenKappa>(); }},
      {"kappa_linear", "CohenKappa", R"({"weights": "linear"})", labels,
       [] { return std::make_shared<km::CohenKappa>(nullptr, W::kLinear); }},
      {"kappa_quadratic_7", "CohenKappa", R"({"weights": "quadratic", "num_classes": 7})", labels,
       [] { return std::make_shared<km::CohenKappa>(nullptr, W::kQuadratic, false, c10::kCPU, 7); }},
      {"mcc_labels", "MatthewsCorrCoef", "{}", labels, [] { return std::make_shared<km::MatthewsCorrCoef>(); }},
      {"mcc_scores", "MatthewsCorrCoef", "{}", scores, [] { return std::make_shared<km::MatthewsCorrCoef>(); }},
      {"mlcm", "MultiLabelConfusionMatrix", R"({"num_classes": 3})", multilabel,
       [] { return std::make_shared<km::MultiLabelConfusionMatrix>(3); }},
      {"mlcm_normalized", "MultiLabelConfusionMatrix", R"({"num_classes": 3, "normalized": true})", multilabel,
       [] { return std::make_shared<km::MultiLabelConfusionMatrix>(3, nullptr, c10::kCPU, true); }},
  };
}

TEST(LabelAgreementTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(cases()); }

TEST(LabelAgreementTest, ValuesWorkedByHand) {
  // ignite's documented example: y = (2, 0, 2, 2, 0, 1), y_pred = (0, 0, 2, 2, 0, 2): p_o = 4/6,
  // rows (true) 2, 1, 3 and columns (predicted) 3, 0, 3: p_e = (6 + 0 + 9) / 36; kappa 3/7.
  const at::Tensor y = at::tensor({2, 0, 2, 2, 0, 1}), y_pred = at::tensor({0, 0, 2, 2, 0, 2});
  km::CohenKappa kappa;
  kappa.update(Value::tuple({y_pred, y}));
  EXPECT_NEAR(kappa.compute().number(), 3.0 / 7, 1e-12);
  // Matthews: 6 samples, 4 correct, true sums (2, 1, 3), predicted (3, 0, 3):
  // (4 * 6 - 15) / sqrt((36 - 14) * (36 - 18)).
  EXPECT_NEAR(km::matthews_corrcoef(y_pred, y), 9 / std::sqrt(22.0 * 18), 1e-12);
  EXPECT_EQ(km::matthews_corrcoef(at::tensor({1, 1}), at::tensor({0, 1})), 0.0);  // one class predicted
  // Per label [[tn, fp], [fn, tp]]: label 0 (pred 1 1 0, true 1 0 0) and label 1 (0 1 1 / 0 1 0).
  km::MultiLabelConfusionMatrix mlcm(2);
  mlcm.update(
      Value::tuple({at::tensor({1, 0, 1, 1, 0, 1}).reshape({3, 2}), at::tensor({1, 0, 0, 1, 0, 0}).reshape({3, 2})}));
  EXPECT_TRUE(at::equal(mlcm.compute().tensor(), at::tensor({1, 1, 0, 1, 1, 1, 0, 1}).reshape({2, 2, 2})));
}

TEST(LabelAgreementTest, MisuseIsRefusedWithWhatWasGiven) {
  km::CohenKappa kappa(nullptr, km::KappaWeights::kNone, false, c10::kCPU, 3);
  EXPECT_NE(error_of([&] {
              kappa.update(Value::tuple({at::ones({2, 3}), at::ones({2, 3})}));
            }).find("CohenKappa: multilabel-indicator is not supported: y_pred must be class indices"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kappa.update(Value::tuple({at::tensor({0, 3}), at::tensor({0, 1})}));
            }).find("y_pred holds the label 3, not below num_classes = 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kappa.update(Value::tuple({at::tensor({0.5, 1.0}), at::tensor({0, 1})}));
            }).find("y_pred must hold whole class indices"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              km::CohenKappa(nullptr, km::KappaWeights::kNone, false, c10::kCPU, 1);
            }).find("num_classes must be at least 2, got 1"),
            std::string::npos);
  km::MatthewsCorrCoef mcc;
  EXPECT_NE(error_of([&] {
              mcc.update(Value::tuple({at::tensor({0, 1}), at::eye(2)}));
            }).find("MatthewsCorrCoef: y_pred holds labels [2] while y holds one-hot rows [2, 2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              mcc.update(Value::tuple({at::tensor({0, 1, 1}), at::tensor({0, 1})}));
            }).find("must hold the same number of samples, but given [3] and [2]"),
            std::string::npos);
  km::MultiLabelConfusionMatrix mlcm(3);
  EXPECT_NE(error_of([&] {
              mlcm.update(Value::tuple({at::ones({2, 3}), at::ones({2, 3}, at::kLong)}));
            }).find("y_pred must have an integer dtype"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              mlcm.update(Value::tuple({at::full({2, 3}, 2, at::kLong), at::ones({2, 3}, at::kLong)}));
            }).find("y_pred must hold 0 and 1 only"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              mlcm.update(Value::tuple({at::ones({2, 4}, at::kLong), at::ones({2, 4}, at::kLong)}));
            }).find("y_pred has 4 classes in dimension 1, expected num_classes = 3"),
            std::string::npos);
  EXPECT_NE(error_of<km::NotComputableError>([&] { mlcm.compute(); }).find("at least one example"), std::string::npos);
}

}  // namespace label_agreement_test
