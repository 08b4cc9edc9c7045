// ClassificationReport (kindling/metrics/classification_report.h): equal to the real ignite
// 0.5.5 on the same batches (tests/metrics/ignite_cases.py, where the build's Python has it: the
// LibTorch 2.15 venv), its JSON text equal to ignite's output_dict=False string character for
// character, and misuse refused with what was given. Across ranks (1, 2 and 3 with an empty
// shard, gloo and mpi): distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/classification_report.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"
#include "support/multiprocess.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace classification_report_test {

using kindling::testing::batches_of;
using kindling::testing::IgniteCase;
using Batch = kindling::testing::MetricBatch;

TEST(ClassificationReportTest, EqualsIgnite055) {
  const auto multiclass = batches_of(71, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(0, 4, {n}, g);
    return Batch{at::randn({n, 4}, g) + 1.5 * at::one_hot(y, 4), y};
  });
  const auto multilabel = batches_of(72, [](at::Generator& g, int64_t n) {
    return Batch{at::randint(0, 2, {n, 3}, g), at::randint(0, 2, {n, 3}, g)};
  });
  using Labels = std::vector<std::string>;
  kindling::testing::expect_ignite_values({
      {"multiclass", "ClassificationReport", R"({"output_dict": true})", multiclass,
       [] { return std::make_shared<km::ClassificationReport>(); }},
      {"multiclass_beta2_labels", "ClassificationReport",
       R"({"output_dict": true, "beta": 2, "labels": ["cat", "dog", "owl", "yak"]})", multiclass,
       [] {
         return std::make_shared<km::ClassificationReport>(2, false, Labels{"cat", "dog", "owl", "yak"});
       }},
      {"multilabel_json", "ClassificationReport", R"({"is_multilabel": true})", multilabel,
       [] { return std::make_shared<km::ClassificationReport>(1, true); }},
  });
}

// ignite's own example (its docstring's multiclass case) with labels that json.dumps escapes.
TEST(ClassificationReportTest, JsonTextIsIgnitesCharacterForCharacter) {
  const at::Tensor y_pred = at::tensor({1.0, 0.0, 0.0, 0.0, 1.0,  0.0,  0.0, 0.0,  1.0, 1.0, 0.0,
                                        0.0, 0.0, 1.0, 0.0, 0.25, 0.75, 0.0, 1e-5, 0.0, 0.7},
                                       at::kDouble)
                                .reshape({7, 3});
  const at::Tensor y = at::tensor({0, 1, 2, 2, 1, 2, 0}, at::kLong);
  const std::vector<std::string> labels{"a\"b", "\xc3\xa9t\xc3\xa9", "tab\there"};
  km::ClassificationReport report(3, false, labels);
  report.update(Value::tuple({y_pred, y}));
  const std::string mine = report.json(report.compute());
  const auto r = kindling::testing::run_command(
      {KINDLING_PYTHON, "-c",
       "import sys, torch\n"
       "sys.path.insert(0, '" KINDLING_SOURCE_DIR "/tests/metrics')\n"
       "from ignite_pinned import require\n"
       "require('ignite.metrics')\n"
       "from ignite.metrics import ClassificationReport\n"
       "m = ClassificationReport(beta=3, labels=['a\"b', '\\u00e9t\\u00e9', 'tab\\there'])\n"
       "y_pred = torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0], [0.25, 0.75, 0],"
       " [1e-5, 0, 0.7]], dtype=torch.float64)\n"
       "m.update((y_pred, torch.tensor([0, 1, 2, 2, 1, 2, 0])))\n"
       "print(m.compute())\n"});
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  ASSERT_TRUE(r.ok()) << kindling::testing::describe({r});
  EXPECT_EQ(mine + "\n", r.out);
  // F3 of P = R = 0.5 is 0.5 less ignite's 1e-15 in the denominator: Python prints 0.4999999999999999.
  EXPECT_NE(mine.find("\"a\\\"b\": {\"precision\": 0.5, \"recall\": 0.5, \"f3-score\": 0.4999999999999999}"),
            std::string::npos)
      << mine;
}

TEST(ClassificationReportTest, MisuseIsRefusedWithWhatWasGiven) {
  EXPECT_NE(error_of([] { km::ClassificationReport report(0); }).find("beta must be at least 1 (ignite's int), got 0"),
            std::string::npos);
  km::ClassificationReport binary;
  binary.update(Value::tuple({at::tensor({1, 0, 1}), at::tensor({1, 1, 0})}));
  EXPECT_NE(error_of([&] { binary.compute(); }).find("binary input gives one precision, not one per class"),
            std::string::npos);
  km::ClassificationReport named(1, false, {"only", "two"});
  named.update(Value::tuple({at::eye(3, at::kDouble), at::tensor({0, 1, 2})}));
  EXPECT_NE(error_of([&] { named.compute(); }).find("2 labels were given for 3 classes"), std::string::npos);
  EXPECT_NE(error_of([&] { named.json(Value(1.0)); }).find("is not a value this report computed"), std::string::npos);
}

}  // namespace classification_report_test
