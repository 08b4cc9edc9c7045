// SubgroupMetric, SubgroupDifference, SubgroupAccuracyDifference, SelectionRate and
// DemographicParityDifference (kindling/metrics/fairness.h): equal to the real ignite 0.5.5 on
// the same batches (tests/metrics/ignite_cases.py, where the build's Python has it: the LibTorch
// 2.15 venv), to values worked by hand, and they refuse misuse with what they were given.
// Across ranks (1, 2 and 3 with an empty shard, gloo and mpi): distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/accuracy.h"
#include "kindling/metrics/fairness.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace fairness_test {

using kindling::testing::batches_of;
using kindling::testing::IgniteCase;
using Batch = kindling::testing::MetricBatch;

std::vector<IgniteCase> cases() {
  // Multiclass logits, labels and groups 0..2 (group 2 right less often).
  const auto multiclass = batches_of(61, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(0, 4, {n}, g), group = at::randint(0, 3, {n}, g);
    const at::Tensor logits = at::randn({n, 4}, g) + 2 * at::one_hot(y, 4) * (group < 2).unsqueeze(1);
    return Batch{logits, at::stack({y, group}, 1)};
  });
  const auto binary = batches_of(62, [](at::Generator& g, int64_t n) {
    const at::Tensor group = at::randint(0, 3, {n}, g);
    const at::Tensor pred = (at::rand({n}, g) < 0.3 + 0.2 * group.to(at::kFloat)).to(at::kLong);
    return Batch{pred, at::stack({at::randint(0, 2, {n}, g), group}, 1)};
  });
  const auto multilabel = batches_of(63, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(0, 2, {n, 3}, g), group = at::randint(0, 2, {n, 1}, g);
    return Batch{at::randint(0, 2, {n, 3}, g), at::cat({y, group}, 1)};
  });
  std::vector<IgniteCase> out{
      {"subgroup_accuracy", "fairness.SubgroupAccuracyDifference", R"({"groups": [0, 1, 2]})", multiclass,
       [] {
         return std::make_shared<km::SubgroupAccuracyDifference>(std::vector<int64_t>{0, 1, 2});
       }},
      {"subgroup_metric", "fairness.SubgroupMetric", R"({"base_metric": {"metric": "Accuracy"}, "groups": [0, 2, 1]})",
       multiclass,
       [] {
         return std::make_shared<km::SubgroupMetric>([] { return std::make_shared<km::Accuracy>(); },
                                                     std::vector<int64_t>{0, 2, 1});
       }},
      {"subgroup_difference_of_recall", "fairness.SubgroupDifference",
       R"({"base_metric": {"metric": "Recall"}, "groups": [0, 1]})", multiclass,
       [] {
         return std::make_shared<km::SubgroupDifference>([] { return std::make_shared<km::Recall>(); },
                                                         std::vector<int64_t>{0, 1});
       }},
      {"demographic_parity", "fairness.DemographicParityDifference", R"({"groups": [0, 1, 2]})", binary,
       [] {
         return std::make_shared<km::DemographicParityDifference>(std::vector<int64_t>{0, 1, 2});
       }},
      {"demographic_parity_multiclass", "fairness.DemographicParityDifference", R"({"groups": [0, 1, 2]})", multiclass,
       [] {
         return std::make_shared<km::DemographicParityDifference>(std::vector<int64_t>{0, 1, 2});
       }},
      {"demographic_parity_multilabel", "fairness.DemographicParityDifference",
       R"({"groups": [0, 1], "is_multilabel": true})", multilabel,
       [] {
         return std::make_shared<km::DemographicParityDifference>(std::vector<int64_t>{0, 1}, true);
       }},
  };
  for (auto& c : out) c.inputs = "groups";
  // SelectionRate alone takes (y_pred, y).
  const auto labels_only = batches_of(64, [](at::Generator& g, int64_t n) {
    return Batch{at::randn({n, 5}, g), at::randint(0, 5, {n}, g)};
  });
  out.push_back({"selection_rate", "fairness.SelectionRate", "{}", labels_only,
                 [] { return std::make_shared<km::SelectionRate>(); }});
  return out;
}

TEST(FairnessTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(cases()); }

TEST(FairnessTest, ValuesWorkedByHand) {
  // Group 0: 2 of 2 right; group 1: 1 of 2 right; group 5: no sample (left out).
  km::SubgroupAccuracyDifference gap({0, 1, 5});
  gap.update(Value::tuple({at::tensor({1L, 0L, 1L, 1L}), at::tensor({1L, 0L, 1L, 0L}), at::tensor({0L, 0L, 1L, 1L})}));
  EXPECT_NEAR(gap.compute().number(), 0.5, 1e-12);
  km::SubgroupMetric per_group([] { return std::make_shared<km::Accuracy>(); }, {0, 1, 5});
  per_group.update(
      Value::tuple({at::tensor({1L, 0L, 1L, 1L}), at::tensor({1L, 0L, 1L, 0L}), at::tensor({0L, 0L, 1L, 1L})}));
  const Value values = per_group.compute();
  ASSERT_EQ(values.named_elements().size(), 2u);
  EXPECT_NEAR(values["0"].item<double>(), 1.0, 1e-12);
  EXPECT_NEAR(values["1"].item<double>(), 0.5, 1e-12);
  // Binary predictions 1, 1, 0, 1: shares of 0 and of 1 are 1/4 and 3/4.
  km::SelectionRate rate;
  rate.update(Value::tuple({at::tensor({1L, 1L, 0L, 1L}), at::tensor({0L, 1L, 0L, 1L})}));
  EXPECT_TRUE(at::allclose(rate.compute().tensor(), at::tensor({0.25, 0.75}, at::kDouble)));
}

TEST(FairnessTest, MisuseIsRefusedWithWhatWasGiven) {
  EXPECT_NE(error_of([] {
              km::SubgroupAccuracyDifference bad({1, 1});
            }).find("every group must be named once"),
            std::string::npos);
  EXPECT_NE(error_of([] { km::SubgroupAccuracyDifference bad({}); }).find("groups must name at least one group"),
            std::string::npos);
  km::SubgroupAccuracyDifference gap({0, 1});
  EXPECT_NE(error_of([&] {
              gap.update(Value::tuple({at::ones({3}, at::kLong), at::ones({3}, at::kLong)}));
            }).find("must be (y_pred, y, group_labels), three tensors"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              gap.update(Value::tuple({at::ones({3}, at::kLong), at::ones({3}, at::kLong), at::ones({2}, at::kLong)}));
            })
                .find("y_pred, y and group_labels must have the same batch size, group_labels of shape (N,), but given "
                      "[3], [3] and [2]"),
            std::string::npos);
  gap.update(Value::tuple({at::ones({2}, at::kLong), at::ones({2}, at::kLong), at::zeros({2}, at::kLong)}));
  EXPECT_NE(error_of<km::NotComputableError>([&] { gap.compute(); }).find("at least two groups with examples, got one"),
            std::string::npos);
}

}  // namespace fairness_test
