// Every metric computed over uneven shards by 1, 2 or 3 real processes (gloo and mpi; a
// rank with no batch at all at 3) equals the single-process value on the union of the
// shards (the per-batch estimates, HSIC and MMD, on shards of whole batches) (the ranking metrics' curves and a
// MetricGroup's entries element by element; the group's MetricsLambda members equal the same lambdas attached on their
// own); RunningAverage of the output averages over the ranks every iteration. A NaN or inf
// input gives ignite 0.5.5's value, the same at 2 to 4 ranks wherever it is (nonfinite_cases.h).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/metrics/metrics.h"
#include "metrics/metric_text.h"
#include "metrics/nonfinite_cases.h"
#include "support/metrics.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace km = kindling::metrics;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::LaunchOptions;
using kindling::testing::metric_lines;
using kindling::testing::numbers;
using kindling::testing::pick;
using kindling::testing::run_workers;
using kindling::testing::same_number;
using kindling::testing::texts_of;

namespace {

constexpr int64_t kSamples = 50;
constexpr int64_t kShardClasses = 4;
constexpr int64_t kBatch = 4;

// One sample's fields, made deterministically from its index.
struct Sample {
  at::Tensor logits, y, bin_pred, bin_y, multilabel_pred, multilabel_y, reg_pred, reg_y;
  at::Tensor tied;  // a binary score in steps of 1/4: many ties across ranks
  at::Tensor det_pred, det_y;  // one image: 3 detections (x1, y1, x2, y2, score, label), 2 boxes (.., label, crowd)
};

Sample sample(int64_t i) {
  at::Generator gen = at::detail::createCPUGenerator(1000 + static_cast<uint64_t>(i));
  Sample s;
  s.logits = at::randn({kShardClasses}, gen);
  s.y = at::scalar_tensor((i * 7) % kShardClasses, at::kLong);
  s.bin_pred = at::scalar_tensor((i * 5) % 3 == 0 ? 1 : 0, at::kLong);
  s.bin_y = at::scalar_tensor(i % 2, at::kLong);
  s.multilabel_pred = (at::rand({3}, gen) > 0.5).to(at::kLong);
  s.multilabel_y = (at::rand({3}, gen) > 0.4).to(at::kLong);
  s.reg_pred = at::randn({}, gen).to(at::kDouble);
  s.reg_y = at::randn({}, gen).to(at::kDouble);
  s.tied = at::floor((at::rand({}, gen) + 0.4 * static_cast<double>(i % 2)) * 4) / 4;
  const at::Tensor corner = at::rand({3, 2}, gen) * 50, side = 4 + at::rand({3, 2}, gen) * 100;
  const at::Tensor boxes = at::cat({corner, corner + side}, 1), labels = at::randint(0, 2, {3, 1}, gen).to(at::kFloat);
  s.det_y = at::cat({boxes.slice(0, 0, 2), labels.slice(0, 0, 2), (at::rand({2, 1}, gen) < 0.2).to(at::kFloat)}, 1);
  s.det_pred = at::cat({boxes * (1 + (at::rand({3, 4}, gen) - 0.5) * 0.3), at::rand({3, 1}, gen), labels}, 1);
  return s;
}

// The indices of `rank`'s shard: uneven on purpose, and empty for the last of 3 ranks.
std::vector<int64_t> shard(int rank, int ws) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < kSamples; ++i) {
    if (ws == 1) {
      out.push_back(i);
    } else if (ws == 2) {
      if ((i < 33) == (rank == 0)) out.push_back(i);
    } else if (rank < ws - 1) {
      if (i % (ws - 1) == rank) out.push_back(i);
    }
  }
  return out;
}

std::vector<Value> batches(const std::vector<int64_t>& indices) {
  std::vector<Value> out;
  for (std::size_t b = 0; b < indices.size(); b += kBatch) {
    std::map<std::string, std::vector<at::Tensor>> parts;
    for (std::size_t k = b; k < std::min(indices.size(), b + kBatch); ++k) {
      Sample s = sample(indices[k]);
      parts["logits"].push_back(s.logits);
      parts["y"].push_back(s.y);
      parts["bin_pred"].push_back(s.bin_pred);
      parts["bin_y"].push_back(s.bin_y);
      parts["ml_pred"].push_back(s.multilabel_pred);
      parts["ml_y"].push_back(s.multilabel_y);
      parts["reg_pred"].push_back(s.reg_pred);
      parts["reg_y"].push_back(s.reg_y);
      parts["tied"].push_back(s.tied);
      parts["det_pred"].push_back(s.det_pred);
      parts["det_y"].push_back(s.det_y);
    }
    std::map<std::string, at::Tensor> named;
    for (auto& kv : parts) named[kv.first] = at::stack(kv.second);
    out.push_back(Value::named(named));
  }
  return out;
}

using NamedMetrics = std::vector<std::pair<std::string, std::shared_ptr<km::Metric>>>;

// The regression metrics, on the regression pair (the rank correlations also on the tied scores).
NamedMetrics regression_metrics() {
  using Kendall = km::KendallRankCorrelation;
  return {
      {"mse", std::make_shared<km::MeanSquaredError>(pick("reg_pred", "reg_y"))},
      {"mae", std::make_shared<km::MeanAbsoluteError>(pick("reg_pred", "reg_y"))},
      {"rmse", std::make_shared<km::RootMeanSquaredError>(pick("reg_pred", "reg_y"))},
      {"canberra", std::make_shared<km::CanberraMetric>(pick("reg_pred", "reg_y"))},
      {"fractional_absolute", std::make_shared<km::FractionalAbsoluteError>(pick("reg_pred", "reg_y"))},
      {"fractional_bias", std::make_shared<km::FractionalBias>(pick("reg_pred", "reg_y"))},
      {"geometric_mean_absolute", std::make_shared<km::GeometricMeanAbsoluteError>(pick("reg_pred", "reg_y"))},
      {"manhattan", std::make_shared<km::ManhattanDistance>(pick("reg_pred", "reg_y"))},
      {"maximum_absolute", std::make_shared<km::MaximumAbsoluteError>(pick("reg_pred", "reg_y"))},
      {"mean_absolute_relative", std::make_shared<km::MeanAbsoluteRelativeError>(pick("reg_pred", "reg_y"))},
      {"mean_error", std::make_shared<km::MeanError>(pick("reg_pred", "reg_y"))},
      {"mean_normalized_bias", std::make_shared<km::MeanNormalizedBias>(pick("reg_pred", "reg_y"))},
      {"wave_hedges", std::make_shared<km::WaveHedgesDistance>(pick("reg_pred", "reg_y"))},
      {"r2", std::make_shared<km::R2Score>(pick("reg_pred", "reg_y"))},
      {"pearson", std::make_shared<km::PearsonCorrelation>(1e-8, pick("reg_pred", "reg_y"))},
      {"median_absolute", std::make_shared<km::MedianAbsoluteError>(pick("reg_pred", "reg_y"))},
      {"median_absolute_percentage", std::make_shared<km::MedianAbsolutePercentageError>(pick("reg_pred", "reg_y"))},
      {"median_relative_absolute", std::make_shared<km::MedianRelativeAbsoluteError>(pick("reg_pred", "reg_y"))},
      {"geometric_mean_relative_absolute",
       std::make_shared<km::GeometricMeanRelativeAbsoluteError>(pick("reg_pred", "reg_y"))},
      {"spearman", std::make_shared<km::SpearmanRankCorrelation>(pick("tied", "reg_y"))},
      {"kendall_b", std::make_shared<Kendall>(Kendall::Variant::kB, pick("tied", "reg_y"))},
      {"kendall_c", std::make_shared<Kendall>(Kendall::Variant::kC, pick("reg_pred", "tied"))},
  };
}

// The information, clustering and recommendation metrics and the accumulations, on the logits,
// the labels and the regression pair.
NamedMetrics breadth_metrics() {
  const auto two_logits = [](const Value& o) { return Value::tuple({o["logits"], o["logits"].flip(1) * 0.5}); };
  const auto positive = [](const Value& o) {
    return Value(at::stack({o["reg_pred"].exp(), o["reg_y"].exp()}, 1));  // (N, 2)
  };
  const auto relevance = [](const Value& o) {  // the label's item relevant (2), one other a little (1)
    const at::Tensor y = o["y"];
    return Value::tuple(
        {o["logits"], at::one_hot(y, kShardClasses) * 2 + at::one_hot((y + 1) % kShardClasses, kShardClasses)});
  };
  // Token rows from the labels and logits: candidates (N, 4), two references each (N, 2, 4).
  const auto sentences = [](const Value& o) {
    const at::Tensor y = o["y"].unsqueeze(1), order = std::get<1>(o["logits"].sort(1));
    return Value::tuple(
        {at::remainder(at::arange(4) + y, 4), at::stack({order, at::remainder(at::arange(4) * y, 4)}, 1)});
  };
  // (y_pred, y, group 0..2 of each sample).
  const auto with_groups = [](const char* pred, const char* target) {
    return [pred, target](const Value& o) { return Value::tuple({o[pred], o[target], o["bin_y"] + o["bin_pred"]}); };
  };
  const auto largest = [](const at::Tensor& a, const at::Tensor& x) { return at::maximum(a, std::get<0>(x.max(0))); };
  return {
      {"entropy", std::make_shared<km::Entropy>(pick("logits", "y"))},
      {"kl", std::make_shared<km::KLDivergence>(two_logits)},
      {"js", std::make_shared<km::JSDivergence>(two_logits)},
      {"mutual_information", std::make_shared<km::MutualInformation>(pick("logits", "y"))},
      {"geometric_average", std::make_shared<km::GeometricAverage>(positive)},
      {"largest",
       std::make_shared<km::VariableAccumulation>(largest, positive, c10::Device(c10::kCPU), kd::ReduceOp::kMax)},
      {"silhouette", std::make_shared<km::SilhouetteScore>(pick("logits", "y"))},
      {"calinski_harabasz", std::make_shared<km::CalinskiHarabaszScore>(pick("logits", "y"))},
      {"davies_bouldin", std::make_shared<km::DaviesBouldinScore>(pick("logits", "y"))},
      {"hit_rate", std::make_shared<km::HitRate>(std::vector<int64_t>{1, 2}, true, relevance)},
      {"ndcg", std::make_shared<km::NDCG>(std::vector<int64_t>{1, 3}, false, 1.0, km::NDCG::Gain::kExpRank, relevance)},
      {"bleu", std::make_shared<km::Bleu>(2, km::Bleu::Smooth::kNoSmooth, sentences)},
      {"bleu_micro", std::make_shared<km::Bleu>(3, km::Bleu::Smooth::kSmooth1, sentences, c10::Device(c10::kCPU),
                                                km::Bleu::Average::kMicro)},
      {"rouge", std::make_shared<km::Rouge>(std::vector<int>{1, 2, km::Rouge::kL}, km::Rouge::MultiRef::kAverage, 0.0,
                                            sentences)},
      {"cer", std::make_shared<km::CharacterErrorRate>([sentences](const Value& o) {
         const Value s = sentences(o);
         return Value::tuple({s[0] + 97, s[1].select(1, 0) + 97});
       })},
      {"perplexity", std::make_shared<km::Perplexity>(pick("logits", "y"))},
      {"map_macro", std::make_shared<km::MeanAveragePrecision>(
                        std::nullopt, km::MeanAveragePrecision::ClassMean::kMacro, false, pick("logits", "y"))},
      {"map_binary", std::make_shared<km::MeanAveragePrecision>(std::vector<double>{0.0, 0.5, 1.0},
                                                                km::MeanAveragePrecision::ClassMean::kMacro, false,
                                                                pick("tied", "bin_y"))},
      {"accuracy_gap", std::make_shared<km::SubgroupAccuracyDifference>(std::vector<int64_t>{0, 1, 2}, false,
                                                                        with_groups("logits", "y"))},
      {"parity_gap", std::make_shared<km::DemographicParityDifference>(std::vector<int64_t>{0, 1, 2}, false,
                                                                       with_groups("bin_pred", "bin_y"))},
      {"per_group", std::make_shared<km::SubgroupMetric>([] { return std::make_shared<km::Accuracy>(); },
                                                         std::vector<int64_t>{0, 1, 2}, with_groups("logits", "y"))},
      {"fid", std::make_shared<km::FID>(kShardClasses, km::FeatureExtractor(), two_logits)},
      {"inception_score",
       std::make_shared<km::InceptionScore>(
           kShardClasses, [](const at::Tensor& logits) { return at::softmax(logits.to(at::kDouble), 1); },
           pick("logits", "y"))},
      {"detection", std::make_shared<km::ObjectDetectionAvgPrecisionRecall>(
                        std::nullopt, std::nullopt, 2, 100, km::ObjectDetectionAvgPrecisionRecall::AreaRange::kAll,
                        pick("det_pred", "det_y"))},
      {"coco", std::make_shared<km::CommonObjectDetectionMetrics>(2, pick("det_pred", "det_y"))},
      {"report", std::make_shared<km::ClassificationReport>(2, false, std::vector<std::string>{}, pick("logits", "y"))},
      {"report_multilabel",
       std::make_shared<km::ClassificationReport>(1, true, std::vector<std::string>{}, pick("ml_pred", "ml_y"))},
  };
}

// HSIC and MMD average an estimate per batch: whole batches are spread over the ranks (every
// other one to ranks 0 and 1, none to rank 2 of 3), so that every world size sees the same batches.
std::map<std::string, std::string> evaluate_batches(int rank, int ws) {
  Engine evaluator([](Engine&, const Value& batch) { return batch; });
  NamedMetrics metrics{
      {"hsic", std::make_shared<km::HSIC>()},
      {"hsic_sigmas", std::make_shared<km::HSIC>(1.0, 2.0)},
      {"mmd", std::make_shared<km::MaximumMeanDiscrepancy>(0.5)},
  };
  for (auto& [name, m] : metrics) m->attach(evaluator, name);
  std::vector<Value> data;
  for (int64_t b = 0; b < 7; ++b) {
    if (rank >= 2 || b % std::min(ws, 2) != rank) continue;
    at::Generator gen = at::detail::createCPUGenerator(2000 + static_cast<uint64_t>(b));
    const at::Tensor x = at::randn({4 + b, 3}, gen).to(at::kDouble);
    data.push_back(Value::tuple({x, at::tanh(x) + 0.2 * at::randn({4 + b, 3}, gen).to(at::kDouble)}));
  }
  evaluator.run(data, 1);
  return texts_of(evaluator.state().metrics);
}

// Runs an evaluator with every metric over this process's shard; returns name -> text.
std::map<std::string, std::string> evaluate(const std::vector<int64_t>& indices) {
  Engine evaluator([](Engine&, const Value& batch) { return batch; });
  NamedMetrics metrics{
      {"accuracy", std::make_shared<km::Accuracy>(pick("logits", "y"))},
      {"binary_accuracy", std::make_shared<km::Accuracy>(pick("bin_pred", "bin_y"))},
      {"multilabel_accuracy", std::make_shared<km::Accuracy>(pick("ml_pred", "ml_y"), true)},
      {"loss",
       std::make_shared<km::Loss>([](const at::Tensor& p, const at::Tensor& y) { return at::cross_entropy_loss(p, y); },
                                  pick("logits", "y"))},
      {"average", std::make_shared<km::Average>([](const Value& o) { return Value(o["reg_pred"].unsqueeze(1)); })},
      {"top2", std::make_shared<km::TopKCategoricalAccuracy>(2, pick("logits", "y"))},
      {"epoch_metric", std::make_shared<km::EpochMetric>(
                           [](const at::Tensor& p, const at::Tensor& y) {
                             return Value((at::argmax(p, 1) == y).to(at::kDouble).mean().item<double>());
                           },
                           pick("logits", "y"))},
  };
  for (auto& entry : regression_metrics()) metrics.push_back(std::move(entry));
  using PR = km::PrecisionRecallBase;
  for (auto [label, average] : {std::pair<const char*, PR::Average>{"none", PR::Average::kNone},
                                {"false", PR::Average::kFalse},
                                {"macro", PR::Average::kMacro},
                                {"micro", PR::Average::kMicro},
                                {"weighted", PR::Average::kWeighted}}) {
    metrics.push_back(
        {std::string("precision_") + label, std::make_shared<km::Precision>(pick("logits", "y"), average)});
    metrics.push_back({std::string("recall_") + label, std::make_shared<km::Recall>(pick("logits", "y"), average)});
  }
  metrics.push_back({"binary_precision", std::make_shared<km::Precision>(pick("bin_pred", "bin_y"))});
  metrics.push_back({"multilabel_recall_samples",
                     std::make_shared<km::Recall>(pick("ml_pred", "ml_y"), PR::Average::kSamples, true)});
  metrics.push_back({"f1", km::Fbeta(1.0, true, nullptr, nullptr, pick("logits", "y"))});
  auto cm = std::make_shared<km::ConfusionMatrix>(kShardClasses, std::nullopt, pick("logits", "y"));
  metrics.push_back({"confusion", cm});
  metrics.push_back(
      {"multilabel_confusion", std::make_shared<km::MultiLabelConfusionMatrix>(3, pick("ml_pred", "ml_y"))});
  metrics.push_back(
      {"cohen_kappa_quadratic", std::make_shared<km::CohenKappa>(pick("bin_pred", "y"), km::KappaWeights::kQuadratic)});
  metrics.push_back({"matthews", std::make_shared<km::MatthewsCorrCoef>(pick("logits", "y"))});
  const auto scores_and_one_hot = [](const Value& o) {
    return Value::tuple({at::sigmoid(o["logits"]), at::one_hot(o["y"], kShardClasses).to(at::kFloat)});
  };
  metrics.push_back({"cosine", std::make_shared<km::CosineSimilarity>(1e-8, scores_and_one_hot)});
  metrics.push_back({"pairwise_distance", std::make_shared<km::MeanPairwiseDistance>(2, 1e-6, scores_and_one_hot)});
  metrics.push_back({"psnr", std::make_shared<km::PSNR>(1.0, scores_and_one_hot)});
  metrics.push_back({"ssim", std::make_shared<km::SSIM>(
                                 1.0, std::vector<int64_t>{1}, std::vector<double>{1.5}, 0.01, 0.03, true,
                                 [scores_and_one_hot](const Value& o) {
                                   const Value v = scores_and_one_hot(o);
                                   return Value::tuple({v[0].reshape({-1, 1, 2, 2}), v[1].reshape({-1, 1, 2, 2})});
                                 })});
  for (auto& entry : breadth_metrics()) metrics.push_back(std::move(entry));
  metrics.push_back({"iou", km::IoU(cm)});
  metrics.push_back({"miou", km::mIoU(cm)});
  auto acc = std::make_shared<km::Accuracy>(pick("logits", "y"));
  metrics.push_back({"lambda", acc * 2.0 + 1.0});
  using Ranked = km::RankingMetric::Average;
  metrics.push_back({"roc_auc", std::make_shared<km::ROC_AUC>(pick("tied", "bin_y"))});
  metrics.push_back({"roc_auc_ovr_weighted", std::make_shared<km::ROC_AUC>(pick("logits", "y"), Ranked::kWeighted)});
  metrics.push_back({"roc_auc_multilabel_none", std::make_shared<km::ROC_AUC>(pick("ml_pred", "ml_y"), Ranked::kNone)});
  metrics.push_back({"average_precision", std::make_shared<km::AveragePrecision>(pick("tied", "bin_y"))});
  metrics.push_back({"average_precision_ovr", std::make_shared<km::AveragePrecision>(pick("logits", "y"))});
  metrics.push_back(
      {"average_precision_micro", std::make_shared<km::AveragePrecision>(pick("ml_pred", "ml_y"), Ranked::kMicro)});
  metrics.push_back({"roc_curve", std::make_shared<km::RocCurve>(pick("tied", "bin_y"))});
  metrics.push_back({"pr_curve", std::make_shared<km::PrecisionRecallCurve>(pick("tied", "bin_y"))});
  metrics.push_back({"group", std::make_shared<km::MetricGroup>(km::MetricGroup::Members{
                                  {"group_accuracy", std::make_shared<km::Accuracy>(pick("logits", "y"))},
                                  {"group_auc", std::make_shared<km::ROC_AUC>(pick("tied", "bin_y"))},
                                  {"group_pr", std::make_shared<km::PrecisionRecallCurve>(pick("tied", "bin_y"))},
                                  {"group_f1", km::Fbeta(1.0, true, nullptr, nullptr, pick("logits", "y"))},
                                  {"group_lambda", std::make_shared<km::Accuracy>(pick("logits", "y")) * 2.0 + 1.0},
                              })});
  for (auto& [name, m] : metrics) m->attach(evaluator, name);
  auto data = batches(indices);
  evaluator.run(data, 1);
  return texts_of(evaluator.state().metrics);
}

}  // namespace

KINDLING_WORKER(metrics_on_shards) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  auto values = evaluate(shard(kd::get_rank(), kd::get_world_size()));
  values.merge(evaluate_batches(kd::get_rank(), kd::get_world_size()));
  for (const auto& [name, text] : values) std::printf("METRIC %s %s\n", name.c_str(), text.c_str());
  std::fflush(stdout);
  kd::finalize();
}

class DistributedMetricsTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(DistributedMetricsTest, EqualTheSingleProcessValueOnTheUnion) {
  auto reference = evaluate(shard(0, 1));  // this process is not distributed
  reference.merge(evaluate_batches(0, 1));
  ASSERT_GE(reference.size(), 76u);
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  opts.deadline = std::chrono::seconds(120);
  auto results = run_workers("metrics_on_shards", opts);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << kindling::testing::describe(results);
    auto got = metric_lines(r.out);
    ASSERT_EQ(got.size(), reference.size()) << r.out;
    // MetricsLambda members of the group equal the same lambdas attached on their own.
    EXPECT_EQ(got["group_f1"], got["f1"]) << "rank " << r.rank;
    EXPECT_EQ(got["group_lambda"], got["lambda"]) << "rank " << r.rank;
    for (const auto& [metric, expected] : reference) {
      const auto want = numbers(expected), have = numbers(got[metric]);
      ASSERT_EQ(have.size(), want.size()) << metric;
      for (std::size_t i = 0; i < want.size(); ++i) {
        // Loss averages float32 batch means, and the batches group other samples on other
        // world sizes: float32 rounding. Everything else accumulates exactly (counts, float64).
        const double tolerance = metric == "loss" ? 1e-6 : 1e-12;
        if (have[i] == want[i]) continue;  // also the ROC curve's first threshold, +infinity
        EXPECT_NEAR(have[i], want[i], tolerance * std::max(1.0, std::abs(want[i])))
            << metric << "[" << i << "] on rank " << r.rank;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DistributedMetricsTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({1, 2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

KINDLING_WORKER(nonfinite_placements) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  for (int placement = 0; placement < kd::get_world_size(); ++placement) {
    for (const auto& [name, text] :
         kindling::testing::evaluate_nonfinite(kd::get_rank(), kd::get_world_size(), placement))
      std::printf("METRIC %d:%s %s\n", placement, name.c_str(), text.c_str());
  }
  std::fflush(stdout);
  kd::finalize();
}

TEST(NonFiniteMetricsTest, EqualIgnite055InOneProcess) {
  const auto values = kindling::testing::evaluate_nonfinite(0, 1, 0);
  for (const auto& c : kindling::testing::nonfinite_cases()) {
    if (!c.expected) continue;
    for (std::size_t v = 0; v < 3; ++v) {
      const std::string key = c.name + "/" + kindling::testing::bad_name(v);
      const double have = numbers(values.at(key)).at(0), want = (*c.expected)[v];
      // 1e-6: ignite's Loss sums in float32.
      EXPECT_TRUE(same_number(have, want, 1e-6)) << key << ": kindling " << have << ", ignite 0.5.5 " << want;
    }
  }
}

// A NaN or inf gives every rank the single-process value, wherever the batch holding it is.
TEST(NonFiniteMetricsTest, SameAtEveryWorldSizeAndPlacement) {
  const auto reference = kindling::testing::evaluate_nonfinite(0, 1, 0);
  for (const auto& [backend, ws] : kindling::testing::cpu_backend_world_sizes({2, 3, 4})) {
    LaunchOptions opts;
    opts.backend = backend;
    opts.world_size = ws;
    opts.deadline = std::chrono::seconds(120);
    const auto results = run_workers("nonfinite_placements", opts);
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << kindling::testing::describe(results);
      const auto got = metric_lines(r.out);
      ASSERT_EQ(got.size(), reference.size() * static_cast<std::size_t>(ws)) << r.out;
      for (int placement = 0; placement < ws; ++placement) {
        for (const auto& [key, text] : reference) {
          const auto want = numbers(text), have = numbers(got.at(std::to_string(placement) + ":" + key));
          ASSERT_EQ(have.size(), want.size()) << key;
          for (std::size_t i = 0; i < want.size(); ++i) {
            EXPECT_TRUE(same_number(have[i], want[i], 1e-12))
                << key << "[" << i << "] " << have[i] << " on rank " << r.rank << " of " << ws << " (" << backend
                << "), the bad batch on rank " << placement << "; one process: " << want[i];
          }
        }
      }
    }
  }
}

KINDLING_WORKER(running_average_over_ranks) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int r = kd::get_rank(), ws = kd::get_world_size();
  Engine trainer([r](Engine& e, const int& b) -> Value { return static_cast<double>(b * (r + 1)); });
  auto avg = km::RunningAverage::of_output([](const Value& o) { return o; }, 0.9);
  avg->attach(trainer, "running");
  std::vector<double> seen;
  trainer.on(Events::ITERATION_COMPLETED, [&](Engine& e) { seen.push_back(e.state().metrics.at("running").number()); });
  std::vector<int> data{1, 2, 3, 4};
  trainer.run(data, 1);
  // Expected: EMA over iterations of the mean over ranks of b * (rank + 1).
  double ema = 0;
  for (std::size_t i = 0; i < data.size(); ++i) {
    const double mean = data[i] * (ws + 1) / 2.0;
    ema = i == 0 ? mean : ema * 0.9 + 0.1 * mean;
    WCHECK(std::abs(seen[i] - ema) < 1e-12, << "iteration " << i + 1 << ": " << seen[i] << " vs " << ema);
  }
  kd::finalize();
}

TEST(RunningAverageTest, OutputIsAveragedOverRanksEachIteration) {
  for (const auto& [backend, ws] : kindling::testing::cpu_backend_world_sizes({2, 3})) {
    LaunchOptions opts;
    opts.backend = backend;
    opts.world_size = ws;
    auto results = run_workers("running_average_over_ranks", opts);
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
  }
}
