// ROC_AUC, RocCurve, AveragePrecision and PrecisionRecallCurve in one process: values against
// an independent torch reference (tests/metrics/ranking_reference.py: the Mann-Whitney AUC,
// AP as the mean precision at each positive's own score, the curves by a direct sweep) on
// data with many tied scores, small cases checked by hand (ignite's documented examples
// among them), the undefined cases and the errors of misuse (shapes at update, values at
// compute); and, at 2 ranks, the same error on every rank for an undefined AUC and for a bad
// value that only one rank stored.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/metrics/metrics.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace {

namespace km = kindling::metrics;
using Avg = km::RankingMetric::Average;
using kindling::engine::Value;
using kindling::testing::error_of;

// One input of the reference comparison: its kind as ranking_reference.py names it.
struct RankingCase {
  std::string name, task;
  at::Tensor pred, target;
};

// Quantised scores (few distinct values: many ties) and targets of each kind and dtype.
std::vector<RankingCase> ranking_cases() {
  at::Generator gen = at::detail::createCPUGenerator(20240530);
  std::vector<RankingCase> cases;
  const at::Tensor binary = at::floor(at::rand({301}, gen) * 12) / 12;  // float32
  cases.push_back({"binary_float", "binary", binary, at::bernoulli(0.25 + 0.5 * binary, gen).to(at::kLong)});
  const at::Tensor logits = at::round(at::randn({257}, gen).to(at::kDouble) * 4) / 4;
  cases.push_back({"binary_bool", "binary", logits, (at::randn({257}, gen).to(at::kDouble) + logits) > 0});
  const at::Tensor classes = at::floor(at::rand({240, 4}, gen) * 6) / 6;
  cases.push_back({"multiclass", "multiclass", classes, at::randint(4, {240}, gen)});
  const at::Tensor labels = at::round(at::randn({180, 3}, gen).to(at::kDouble) * 3) / 3;
  cases.push_back({"multilabel", "multilabel", labels, at::bernoulli(at::full({180, 3}, 0.4), gen)});
  return cases;
}

std::string ranking_numbers(const at::Tensor& t) {
  std::ostringstream out;
  const at::Tensor d = t.to(at::kDouble).reshape({-1});
  for (int64_t i = 0; i < d.numel(); ++i) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), " %.17g", d[i].item<double>());
    out << buf;
  }
  return out.str();
}

// "<case> <quantity>" -> values, from ranking_reference.py run on `cases`.
std::map<std::string, std::vector<double>> ranking_reference(const std::vector<RankingCase>& cases) {
  kindling::testing::TempDir dir("ranking");
  const std::string path = dir.path() + "/cases.txt";
  {
    std::ofstream data(path);
    for (const RankingCase& c : cases) {
      data << "case " << c.name << " " << c.task << " " << c.pred.size(0) << " "
           << (c.pred.dim() == 2 ? c.pred.size(1) : 0) << "\npred" << ranking_numbers(c.pred) << "\ntarget"
           << ranking_numbers(c.target) << "\n";
    }
  }
  const auto r = kindling::testing::run_command(
      {KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/metrics/ranking_reference.py", path});
  EXPECT_TRUE(r.ok()) << kindling::testing::describe({r});
  std::map<std::string, std::vector<double>> out;
  std::istringstream lines(r.out);
  std::string name, quantity, values;
  while (lines >> name >> quantity >> values) {
    std::stringstream items(values);
    for (std::string item; std::getline(items, item, ',');) out[name + " " + quantity].push_back(std::stod(item));
  }
  return out;
}

// A value's numbers: a number, a tensor's elements, or each tuple element's in turn.
std::vector<double> ranking_flat(const Value& v) {
  std::vector<at::Tensor> parts = v.is_tuple() ? v.tuple_elements() : std::vector<at::Tensor>{v.tensor()};
  std::vector<double> out;
  for (const at::Tensor& t : parts) {
    const at::Tensor d = t.to(at::kDouble).reshape({-1});
    for (int64_t i = 0; i < d.numel(); ++i) out.push_back(d[i].item<double>());
  }
  return out;
}

void expect_ranking_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool same = got[i] == want[i] || std::abs(got[i] - want[i]) <= 1e-12 * std::max(1.0, std::abs(want[i]));
    EXPECT_TRUE(same) << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
}

// The metric's value over `c` fed in uneven batches (1, 17, 60 samples, then the rest).
Value ranking_computed(km::Metric& metric, const RankingCase& c) {
  metric.reset();
  const int64_t n = c.pred.size(0);
  int64_t start = 0;
  for (int64_t size : {int64_t{1}, int64_t{17}, int64_t{60}, n}) {
    const int64_t stop = std::min(n, start + size);
    if (stop > start) metric.update({c.pred.slice(0, start, stop), c.target.slice(0, start, stop)});
    start = stop;
  }
  return metric.compute();
}

}  // namespace

TEST(RankingMetricsTest, MatchAnIndependentTorchReferenceOnTiedScores) {
  const auto cases = ranking_cases();
  const auto reference = ranking_reference(cases);
  ASSERT_FALSE(reference.empty());
  const std::vector<std::pair<Avg, std::string>> averages{
      {Avg::kMacro, "macro"}, {Avg::kWeighted, "weighted"}, {Avg::kMicro, "micro"}, {Avg::kNone, "none"}};
  for (const RankingCase& c : cases) {
    for (const auto& [average, label] : averages) {
      // Binary input has one value whatever the average: the reference's averages of it agree.
      km::ROC_AUC auc({}, average);
      expect_ranking_near(ranking_flat(ranking_computed(auc, c)), reference.at(c.name + " auc_" + label),
                          c.name + " ROC_AUC " + label);
      km::AveragePrecision ap({}, average);
      expect_ranking_near(ranking_flat(ranking_computed(ap, c)), reference.at(c.name + " ap_" + label),
                          c.name + " AveragePrecision " + label);
    }
    if (c.task != "binary") continue;
    km::RocCurve roc;
    const Value curve = ranking_computed(roc, c);
    ASSERT_TRUE(curve.is_tuple());
    ASSERT_EQ(curve.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      const std::string part = std::vector<std::string>{"roc_fpr", "roc_tpr", "roc_thresholds"}[i];
      expect_ranking_near(ranking_flat(curve[i]), reference.at(c.name + " " + part), c.name + " " + part);
    }
    km::PrecisionRecallCurve pr;
    const Value pr_curve = ranking_computed(pr, c);
    for (std::size_t i = 0; i < 3; ++i) {
      const std::string part = std::vector<std::string>{"pr_precision", "pr_recall", "pr_thresholds"}[i];
      expect_ranking_near(ranking_flat(pr_curve[i]), reference.at(c.name + " " + part), c.name + " " + part);
    }
  }
}

TEST(RankingMetricsTest, IgniteDocumentedExamples) {
  // ignite's docs: ROC_AUC 0.6666..., PrecisionRecallCurve precision [0.5, 0.6667, 1, 1, 1],
  // recall [1, 1, 1, 0.5, 0]; the positive 0.7109 outscores 2 of the 3 negatives.
  const at::Tensor scores = at::tensor({0.0474, 0.5987, 0.7109, 0.9997}, at::kDouble);
  km::ROC_AUC auc;
  auc.update({scores.view({4, 1}), at::tensor({0, 0, 1, 0}, at::kLong).view({4, 1})});
  EXPECT_DOUBLE_EQ(auc.compute().number(), 2.0 / 3.0);

  km::PrecisionRecallCurve pr;
  pr.update({scores, at::tensor({0, 0, 1, 1}, at::kLong)});
  const Value curve = pr.compute();
  expect_ranking_near(ranking_flat(curve[0]), {0.5, 2.0 / 3.0, 1, 1, 1}, "precision");
  expect_ranking_near(ranking_flat(curve[1]), {1, 1, 1, 0.5, 0}, "recall");
  expect_ranking_near(ranking_flat(curve[2]), {0.0474, 0.5987, 0.7109, 0.9997}, "thresholds");

  // ignite's RocCurve prints fpr [0, 0.333, 0.333, 1]: it drops the collinear point at
  // 0.5987 (scikit-learn's drop_intermediate); kindling keeps every threshold.
  km::RocCurve roc;
  roc.update({scores, at::tensor({0, 0, 1, 0}, at::kLong)});
  const Value r = roc.compute();
  expect_ranking_near(ranking_flat(r[0]), {0, 1.0 / 3, 1.0 / 3, 2.0 / 3, 1}, "fpr");
  expect_ranking_near(ranking_flat(r[1]), {0, 0, 1, 1, 1}, "tpr");
  expect_ranking_near(ranking_flat(r[2]), {std::numeric_limits<double>::infinity(), 0.9997, 0.7109, 0.5987, 0.0474},
                      "thresholds");
}

TEST(RankingMetricsTest, TiesAndAveragesByHand) {
  // Scores 0.5 (positive), 0.5 (negative), 0.5 (positive), 0.2 (negative): each positive
  // ties one negative (1/2) and beats the other (1): AUC (2 * 1/2 + 2 * 1) / 4 = 3/4. The
  // tie enters whole: AP = recall 1 at precision 2/3.
  const at::Tensor scores = at::tensor({0.5f, 0.5f, 0.5f, 0.2f});
  const at::Tensor y = at::tensor({1, 0, 1, 0}, at::kLong);
  km::ROC_AUC auc;
  auc.update({scores, y});
  EXPECT_DOUBLE_EQ(auc.compute().number(), 0.75);
  km::AveragePrecision ap;
  ap.update({scores, y});
  EXPECT_DOUBLE_EQ(ap.compute().number(), 2.0 / 3.0);

  // One-vs-rest: class 1's positives score 0.4 and 0.1 against negatives 0.1 and 0.2:
  // (1 + 1 + 1/2 + 0) / 4 = 0.625; classes 0 and 2 are ranked perfectly (1).
  const at::Tensor p =
      at::tensor({0.8, 0.1, 0.1, 0.3, 0.4, 0.3, 0.2, 0.2, 0.6, 0.5, 0.1, 0.4}, at::kDouble).view({4, 3});
  const at::Tensor classes = at::tensor({0, 1, 2, 1}, at::kLong);
  auto value_of = [&](Avg average) {
    km::ROC_AUC m({}, average);
    m.update({p, classes});
    return m.compute();
  };
  expect_ranking_near(ranking_flat(value_of(Avg::kNone)), {1, 0.625, 1}, "none");
  EXPECT_DOUBLE_EQ(value_of(Avg::kMacro).number(), (1 + 0.625 + 1) / 3);
  EXPECT_DOUBLE_EQ(value_of(Avg::kWeighted).number(), (1 * 1 + 0.625 * 2 + 1 * 1) / 4.0);  // by positives
  EXPECT_STREQ(km::to_string(Avg::kNone), "None");
  EXPECT_STREQ(km::to_string(Avg::kWeighted), "weighted");
}

TEST(RankingMetricsTest, UndefinedCasesAsScikitLearn) {
  km::ROC_AUC auc;
  auc.update({at::tensor({0.1, 0.7, 0.3}), at::zeros({3}, at::kLong)});
  const std::string one_class = error_of<km::NotComputableError>([&] { auc.compute(); });
  EXPECT_NE(one_class.find("kindling::metrics::ROC_AUC: only one class is present in y (all 3 targets are 0)"),
            std::string::npos)
      << one_class;
  EXPECT_NE(one_class.find("not defined"), std::string::npos) << one_class;

  km::ROC_AUC ovr({}, Avg::kNone);
  ovr.update({at::rand({4, 3}), at::tensor({0, 1, 0, 1}, at::kLong)});
  const std::string missing = error_of<km::NotComputableError>([&] { ovr.compute(); });
  EXPECT_NE(missing.find("class 2 has no positive sample (all 4 samples are negatives of it)"), std::string::npos)
      << missing;

  // AP without a positive: 0 and one warning per compute naming the classes (labels).
  km::AveragePrecision ap({}, Avg::kNone);
  ap.update({at::rand({5, 3}), at::tensor({1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, at::kLong).view({5, 3})});
  ::testing::internal::CaptureStderr();
  const Value per_label = ap.compute();
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(per_label.tensor()[1].item<double>(), 0.0);
  EXPECT_EQ(per_label.tensor()[2].item<double>(), 0.0);
  EXPECT_GT(per_label.tensor()[0].item<double>(), 0.0);
  EXPECT_NE(warned.find("AveragePrecision: no positive sample in label 1, label 2, so the average precision there "
                        "counts as 0"),
            std::string::npos)
      << warned;
  EXPECT_EQ(warned.find("AveragePrecision", warned.find("AveragePrecision") + 1), std::string::npos) << "once";

  // The curves keep scikit-learn's values: recall 1 without positives, a NaN fpr without negatives.
  km::PrecisionRecallCurve pr;
  pr.update({at::tensor({0.2, 0.9}), at::zeros({2})});
  ::testing::internal::CaptureStderr();
  const Value curve = pr.compute();
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("recall is set to 1"), std::string::npos);
  expect_ranking_near(ranking_flat(curve[1]), {1, 1, 0}, "recall without positives");
  km::RocCurve roc;
  roc.update({at::tensor({0.2, 0.9}), at::ones({2}, at::kBool)});
  ::testing::internal::CaptureStderr();
  const Value r = roc.compute();
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("no negative sample"), std::string::npos);
  EXPECT_TRUE(std::isnan(r[0][1].item<double>()));
  expect_ranking_near(ranking_flat(r[1]), {0, 0.5, 1}, "tpr");

  km::ROC_AUC empty;
  EXPECT_NE(error_of<km::NotComputableError>([&] {
              empty.compute();
            }).find("ROC_AUC must have at least one example before it can be computed"),
            std::string::npos);
}

TEST(RankingMetricsTest, ShapeMisuseIsRefusedAtUpdateAndStoresNothing) {
  km::ROC_AUC auc;
  auc.update({at::tensor({0.1, 0.8}), at::tensor({0, 1})});
  EXPECT_NE(error_of<kindling::UsageError>([&] {
              auc.update({at::tensor({0.1, 0.8}), at::zeros({2, 3})});
            }).find("binary scores y_pred of shape [2] pair with targets y of shape [N], but y has shape [2, 3]"),
            std::string::npos);
  EXPECT_NE(error_of<kindling::UsageError>([&] {
              auc.update({at::tensor({0.1, 0.3, 0.5}), at::tensor({0, 1})});
            }).find("y_pred and y should hold as many samples, but they have shapes [3] and [2]"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(auc.compute().number(), 1.0);  // the refused batches were not stored

  km::AveragePrecision ap;
  EXPECT_NE(error_of<kindling::UsageError>([&] {
              ap.update({at::rand({3, 4}), at::zeros({3, 2})});
            }).find("multilabel targets y should have the shape of y_pred, [3, 4], but have [3, 2]"),
            std::string::npos);

  km::PrecisionRecallCurve pr;
  const std::string curve = error_of([&] { pr.update({at::rand({3, 4}), at::tensor({0, 3, 1})}); });
  EXPECT_NE(curve.find("kindling::metrics::PrecisionRecallCurve takes binary input only"), std::string::npos) << curve;
  EXPECT_NE(curve.find("got multiclass input (y_pred [3, 4], y [3]); use output_transform to pick one class"),
            std::string::npos)
      << curve;
  km::RocCurve roc;
  EXPECT_NE(error_of([&] {
              roc.update({at::rand({3, 2}), at::zeros({3, 2})});
            }).find("takes binary input only"),
            std::string::npos);
}

// Values are checked at compute (on rank 0 in a distributed run, which forwards the error to
// every rank), not at update: a value that only one rank sees must not make that rank alone
// throw. The message names the value and where it lies among the epoch's samples.
TEST(RankingMetricsTest, ValueMisuseIsRefusedAtComputeWithTheValueSeen) {
  // Each (metric, batches, expected message): update accepts the batches, compute refuses.
  auto refused_at_compute = [](km::Metric& metric, const std::vector<Value>& batches, const std::string& expected) {
    metric.reset();
    for (const Value& b : batches) EXPECT_NO_THROW(metric.update(b)) << expected;
    const std::string error = error_of<kindling::UsageError>([&] { metric.compute(); });
    EXPECT_NE(error.find(expected), std::string::npos) << error;
  };
  km::ROC_AUC auc;
  refused_at_compute(auc, {{at::tensor({0.1, 0.8}), at::tensor({0, 1})}, {at::tensor({0.3}), at::tensor({2})}},
                     "ROC_AUC: binary targets y should be 0 or 1, but y holds 2 (sample 2 of the 3 stored by all "
                     "ranks, in rank order); for class indices give y_pred every class's score, of shape [N, C]");
  refused_at_compute(auc, {{at::tensor({0.1, std::numeric_limits<double>::quiet_NaN()}), at::tensor({0, 1})}},
                     "ROC_AUC: y_pred should hold finite scores, but it holds nan (sample 1 of the 2 stored by all "
                     "ranks, in rank order); check the model's output");
  km::AveragePrecision ap;
  refused_at_compute(ap, {{at::rand({3, 4}), at::tensor({0, 4, 1})}},
                     "multiclass targets y should be class indices in [0, 4) (y_pred has 4 columns of scores), but y "
                     "holds 4 (sample 1 of the 3");
  refused_at_compute(ap, {{at::rand({2, 2}), at::tensor({0.0, 1.0, 1.0, 0.5}).view({2, 2})}},
                     "multilabel targets y should be 0 or 1, but y holds 0.5 (sample 1 of the 2");
  km::RocCurve roc;
  refused_at_compute(roc, {{at::tensor({-std::numeric_limits<double>::infinity(), 0.5}), at::tensor({0, 1})}},
                     "RocCurve: y_pred should hold finite scores, but it holds -inf (sample 0 of the 2");
  km::PrecisionRecallCurve pr;
  refused_at_compute(pr, {{at::tensor({0.2, 0.5}), at::tensor({-1, 1})}},
                     "PrecisionRecallCurve: binary targets y should be 0 or 1, but y holds -1 (sample 0 of the 2");
  // A reset clears the refused values.
  auc.reset();
  auc.update({at::tensor({0.1, 0.8}), at::tensor({0, 1})});
  EXPECT_DOUBLE_EQ(auc.compute().number(), 1.0);
}

TEST(RankingMetricsTest, AttachedValuesReachTheEngineState) {
  using kindling::engine::Engine;
  Engine evaluator([](Engine&, const Value& batch) { return batch; });
  auto auc = std::make_shared<km::ROC_AUC>(km::OutputTransform(), Avg::kNone);
  auto pr = std::make_shared<km::PrecisionRecallCurve>([](const Value& o) {  // class 1 against the rest
    return Value{o[0].select(1, 1), o[1] == 1};
  });
  auc->attach(evaluator, "auc");
  pr->attach(evaluator, "pr");
  std::vector<Value> data{{at::tensor({0.9, 0.1, 0.2, 0.7}).view({2, 2}), at::tensor({0, 1}, at::kLong)},
                          {at::tensor({0.3, 0.6, 0.8, 0.4}).view({2, 2}), at::tensor({1, 0}, at::kLong)}};
  evaluator.run(data, 1);
  const Value& per_class = evaluator.state().metrics.at("auc");
  ASSERT_TRUE(per_class.is_tensor());
  // Class 1 scores 0.1, 0.7 (positive), 0.6 (positive), 0.4: both positives rank first.
  expect_ranking_near(ranking_flat(per_class), {1, 1}, "per class");
  const Value& curve = evaluator.state().metrics.at("pr");
  ASSERT_TRUE(curve.is_tuple());
  expect_ranking_near(ranking_flat(curve[2]), {0.1, 0.4, 0.6, 0.7}, "thresholds");
}

KINDLING_WORKER(ranking_undefined_on_every_rank) {
  namespace kd = kindling::dist;
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  km::ROC_AUC auc;
  if (kd::get_rank() == 0) auc.update({at::tensor({0.2, 0.4}), at::zeros({2}, at::kLong)});  // rank 1: nothing
  const std::string error = error_of<km::NotComputableError>([&] { auc.compute(); });
  WCHECK(error.find("only one class is present in y (all 2 targets are 0)") != std::string::npos, << error);
  std::printf("RANKED %s\n", error.c_str());
  std::fflush(stdout);
  kd::finalize();
}

TEST(RankingMetricsTest, UndefinedAucThrowsTheSameErrorOnEveryRank) {
  for (const auto& [backend, ws] : kindling::testing::cpu_backend_world_sizes({2})) {
    kindling::testing::LaunchOptions opts;
    opts.backend = backend;
    opts.world_size = ws;
    const auto results = kindling::testing::run_workers("ranking_undefined_on_every_rank", opts);
    for (const auto& r : results) {
      EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
      EXPECT_NE(r.out.find("RANKED "), std::string::npos) << backend << " rank " << r.rank;
    }
  }
}

// Only rank 1 stores a bad value: before the value checks moved to compute, rank 1 threw at
// update and rank 0 waited in compute's gather until the timeout. Now both ranks reach
// compute and throw the same UsageError. A short collective timeout turns a hang into a
// failure quickly.
KINDLING_WORKER(ranking_bad_value_on_one_rank) {
  namespace kd = kindling::dist;
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(10)));
  const bool bad_rank = kd::get_rank() == 1;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  km::ROC_AUC auc;
  auc.update({at::tensor({0.2, bad_rank ? nan : 0.4}), at::tensor({0, 1}, at::kLong)});
  const std::string score = error_of<kindling::UsageError>([&] { auc.compute(); });
  WCHECK(score.find("ROC_AUC: y_pred should hold finite scores, but it holds nan (sample 3 of the 4 stored by all "
                    "ranks, in rank order)") != std::string::npos,
         << score);
  // Through an engine: the metric's handlers are where the values used to be refused.
  kindling::engine::Engine evaluator([](kindling::engine::Engine&, const Value& batch) { return batch; });
  auto ap = std::make_shared<km::AveragePrecision>();
  ap->attach(evaluator, "ap");
  std::vector<Value> data{{at::tensor({0.2, 0.9}), at::tensor({0, 1}, at::kLong)},
                          {at::tensor({0.7}), at::tensor({bad_rank ? 2 : 1}, at::kLong)}};
  const std::string label = error_of<kindling::UsageError>([&] { evaluator.run(data, 1); });
  WCHECK(label.find("AveragePrecision: binary targets y should be 0 or 1, but y holds 2 (sample 5 of the 6 stored "
                    "by all ranks, in rank order)") != std::string::npos,
         << label);
  if (!bad_rank) {
    WCHECK(label.find("compute_fn failed on rank 0") == std::string::npos, << label);
  } else {
    WCHECK(label.find("compute_fn failed on rank 0") != std::string::npos, << label);
  }
  std::printf("REFUSED\n");
  std::fflush(stdout);
  kd::finalize();
}

TEST(RankingMetricsTest, BadValueOnOneRankThrowsTheSameErrorOnEveryRank) {
  for (const auto& [backend, ws] : kindling::testing::cpu_backend_world_sizes({2})) {
    kindling::testing::LaunchOptions opts;
    opts.backend = backend;
    opts.world_size = ws;
    opts.deadline = std::chrono::seconds(40);
    const auto results = kindling::testing::run_workers("ranking_bad_value_on_one_rank", opts);
    for (const auto& r : results) {
      EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
      EXPECT_NE(r.out.find("REFUSED"), std::string::npos) << backend << " rank " << r.rank;
    }
  }
}
