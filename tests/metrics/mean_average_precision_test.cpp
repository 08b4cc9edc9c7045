// MeanAveragePrecision (kindling/metrics/mean_average_precision.h): equal to the real ignite 0.5.5
// on the same batches (tests/metrics/ignite_cases.py, where the build's Python has it: the
// LibTorch 2.15 venv): binary with ties, multiclass (macro, weighted, micro, per class),
// multilabel, recall thresholds; a value worked by hand; misuse refused with what was given.
// Across ranks (1, 2 and 3 with an empty shard, gloo and mpi): distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/metrics/mean_average_precision.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace mean_average_precision_test {

using kindling::testing::batches_of;
using kindling::testing::IgniteCase;
using Batch = kindling::testing::MetricBatch;
using Map = km::MeanAveragePrecision;

std::vector<IgniteCase> cases() {
  const auto binary = batches_of(71, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(0, 2, {n}, g);
    return Batch{at::round((at::rand({n}, g) + 0.3 * y) * 5) / 8, y};  // scores in steps of 1/8: ties
  });
  const auto multiclass = batches_of(72, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(0, 4, {n}, g);
    return Batch{at::softmax(at::randn({n, 4}, g) + at::one_hot(y, 4), 1), y};
  });
  const auto multilabel = batches_of(73, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(0, 2, {n, 3}, g);
    return Batch{at::sigmoid(at::randn({n, 3}, g) + y), y};
  });
  const std::vector<double> eleven{0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  return {
      {"binary", "MeanAveragePrecision", "{}", binary, [] { return std::make_shared<Map>(); }},
      {"macro", "MeanAveragePrecision", "{}", multiclass, [] { return std::make_shared<Map>(); }},
      {"weighted", "MeanAveragePrecision", R"({"class_mean": "weighted"})", multiclass,
       [] { return std::make_shared<Map>(std::nullopt, Map::ClassMean::kWeighted); }},
      {"micro", "MeanAveragePrecision", R"({"class_mean": "micro"})", multiclass,
       [] { return std::make_shared<Map>(std::nullopt, Map::ClassMean::kMicro); }},
      {"per_class", "MeanAveragePrecision", R"({"class_mean": null})", multiclass,
       [] { return std::make_shared<Map>(std::nullopt, Map::ClassMean::kNone); }},
      {"multilabel", "MeanAveragePrecision", R"({"is_multilabel": true})", multilabel,
       [] { return std::make_shared<Map>(std::nullopt, Map::ClassMean::kMacro, true); }},
      {"eleven_points", "MeanAveragePrecision",
       // A float64 tensor: ignite makes a list float32, and 0.1 becomes 0.10000000149, which moves
       // the thresholds off recalls such as 1/10 (kindling keeps the doubles given).
       R"({"rec_thresholds": {"float64": [1.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]}})", multiclass,
       [eleven] { return std::make_shared<Map>(eleven); }},
  };
}

TEST(MeanAveragePrecisionTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(cases()); }

TEST(MeanAveragePrecisionTest, ValueWorkedByHandAndMisuse) {
  // Positives ranked 1st and 3rd of 4: precision 1 at recall 1/2, 2/3 at recall 1.
  Map map;
  map.update(Value::tuple({at::tensor({0.9, 0.8, 0.7, 0.6}), at::tensor({1L, 0L, 1L, 0L})}));
  EXPECT_NEAR(map.compute().number(), 0.5 * 1.0 + 0.5 * 2.0 / 3.0, 1e-12);
  EXPECT_NE(error_of([&] {
              map.update(Value::tuple({at::ones({2}, at::kLong), at::ones({2}, at::kLong)}));
            }).find("y_pred must be floating-point scores, but given Long"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              map.update(Value::tuple({at::rand({2, 3}), at::tensor({0L, 3L})}));
            }).find("labels must lie in [0, 3) for scores of 3 classes"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              map.update(Value::tuple({at::rand({2}), at::tensor({0L, 2L})}));
            }).find("y must hold 0's and 1's"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Map bad(std::vector<double>{0.5, 1.5});
            }).find("rec_thresholds must lie in [0, 1], got 1.5"),
            std::string::npos);
}

}  // namespace mean_average_precision_test
