#pragma once
// Metrics given a NaN, +inf or -inf (distributed_metrics_test.cpp, NonFiniteMetricsTest):
// three batches of (y_pred, y), the middle one holding the bad value, fed to every metric
// that takes such input, and ignite 0.5.5's value for each. The ignite values were measured
// with ignite 0.5.5 itself (pip's pytorch-ignite 0.5.5 over Debian's torch 1.13, the same
// batches in float64 and the same output transforms, spelled in Python).
#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/metrics/metrics.h"
#include "metrics/metric_text.h"

namespace kindling {
namespace testing {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The bad values, as the cases' values are listed, and their names in a metric's key.
inline const std::array<double, 3>& bad_values() {
  static const std::array<double, 3> values{kNaN, kInf, -kInf};
  return values;
}
inline const char* bad_name(std::size_t i) { return i == 0 ? "nan" : i == 1 ? "inf" : "-inf"; }

/// Batch 0, 1 (y_pred[1] = `bad`) or 2: (y_pred, y), float64 of shape (N,).
inline engine::Value nonfinite_batch(int64_t b, double bad) {
  const auto t = [](std::vector<double> v) { return at::tensor(v, at::kDouble); };
  if (b == 0) return engine::Value::tuple({t({1.0, 2.5, 3.0}), t({1.5, 2.0, 4.0})});
  if (b == 1) return engine::Value::tuple({t({2.0, bad, 0.5}), t({1.0, 3.0, 1.0})});
  return engine::Value::tuple({t({4.0, 1.0}), t({3.0, 2.0})});
}

struct NonFiniteCase {
  std::string name;
  std::function<std::shared_ptr<metrics::Metric>()> make;
  /// The value with bad_values()[i] in batch 1, from ignite 0.5.5 (or, where ignite has no
  /// such metric, as torch.maximum / torch.minimum give it); nullopt: not compared.
  std::optional<std::array<double, 3>> expected;
};

using Three = std::array<double, 3>;
inline Three same3(double v) { return Three{v, v, v}; }

/// The metrics of (y_pred, y) as they are.
inline std::vector<NonFiniteCase> pair_cases() {
  namespace km = metrics;
  const Three nan3 = same3(kNaN), nan_inf_inf{kNaN, kInf, kInf}, signed_inf{kNaN, -kInf, kInf};
  return {
      {"canberra", [] { return std::make_shared<km::CanberraMetric>(); }, nan3},
      {"fractional_absolute", [] { return std::make_shared<km::FractionalAbsoluteError>(); }, nan3},
      {"fractional_bias", [] { return std::make_shared<km::FractionalBias>(); }, nan3},
      {"geometric_mean_absolute", [] { return std::make_shared<km::GeometricMeanAbsoluteError>(); }, nan_inf_inf},
      {"geometric_mean_relative_absolute", [] { return std::make_shared<km::GeometricMeanRelativeAbsoluteError>(); },
       nan_inf_inf},
      {"manhattan", [] { return std::make_shared<km::ManhattanDistance>(); }, nan_inf_inf},
      // ignite keeps a batch's maximum only if it is larger: the batch holding NaN is skipped.
      {"maximum_absolute", [] { return std::make_shared<km::MaximumAbsoluteError>(); }, Three{1.0, kInf, kInf}},
      {"mean_absolute_relative", [] { return std::make_shared<km::MeanAbsoluteRelativeError>(); }, nan_inf_inf},
      {"mean_error", [] { return std::make_shared<km::MeanError>(); }, signed_inf},
      {"mean_normalized_bias", [] { return std::make_shared<km::MeanNormalizedBias>(); }, signed_inf},
      // ignite's median (torch.kthvalue) ranks NaN and inf above every number.
      {"median_absolute", [] { return std::make_shared<km::MedianAbsoluteError>(); }, same3(1.0)},
      {"median_absolute_percentage", [] { return std::make_shared<km::MedianAbsolutePercentageError>(); },
       same3(41.666666666666664)},
      {"median_relative_absolute", [] { return std::make_shared<km::MedianRelativeAbsoluteError>(); },
       same3(1.0364372469635628)},
      {"wave_hedges", [] { return std::make_shared<km::WaveHedgesDistance>(); }, Three{kNaN, kNaN, kInf}},
      {"r2", [] { return std::make_shared<km::R2Score>(); }, Three{kNaN, -kInf, -kInf}},
      {"pearson", [] { return std::make_shared<km::PearsonCorrelation>(); }, nan3},
      {"spearman", [] { return std::make_shared<km::SpearmanRankCorrelation>(); }, std::nullopt},  // scipy's
      {"mse", [] { return std::make_shared<km::MeanSquaredError>(); }, nan_inf_inf},
      {"mae", [] { return std::make_shared<km::MeanAbsoluteError>(); }, nan_inf_inf},
      {"rmse", [] { return std::make_shared<km::RootMeanSquaredError>(); }, nan_inf_inf},
  };
}

/// The metrics of other shapes, made from y_pred and y by an output transform.
inline std::vector<NonFiniteCase> shaped_cases() {
  namespace km = metrics;
  using engine::Value;
  const auto column = [](const Value& o) { return Value(o[0].unsqueeze(1)); };
  const auto columns = [](const Value& o) { return Value::tuple({o[0].unsqueeze(1), o[1].unsqueeze(1)}); };
  const auto row = [](const Value& o) { return Value::tuple({o[0].unsqueeze(0), o[1].unsqueeze(0)}); };
  const auto twice = [](const Value& o) {
    return Value::tuple({o[0].unsqueeze(1).repeat({1, 2}), o[1].unsqueeze(1).repeat({1, 2})});
  };
  const auto pairs = [](const Value& o) {
    return Value::tuple({at::stack({o[0], o[1]}, 1), at::stack({o[1], o[0] + 1}, 1)});
  };
  const auto image = [](const Value& o) {  // (1, 1, 4, 4) of the first two values, repeated
    const auto of = [](const at::Tensor& t) { return t.slice(0, 0, 2).reshape({1, 1, 1, 2}).repeat({1, 1, 4, 2}); };
    return Value::tuple({of(o[0]), of(o[1])});
  };
  const auto extreme = [](bool largest) -> km::VariableAccumulation::Op {
    return [largest](const at::Tensor& a, const at::Tensor& x) {
      return largest ? at::maximum(a, std::get<0>(x.max(0))) : at::minimum(a, std::get<0>(x.min(0)));
    };
  };
  const Three nan3 = same3(kNaN), nan_inf_inf{kNaN, kInf, kInf};
  const c10::Device cpu(c10::kCPU);
  return {
      {"pairwise_distance", [=] { return std::make_shared<km::MeanPairwiseDistance>(2, 1e-6, columns); }, nan_inf_inf},
      {"cosine", [=] { return std::make_shared<km::CosineSimilarity>(1e-8, twice); }, nan3},
      {"psnr", [=] { return std::make_shared<km::PSNR>(5.0, row); }, Three{kNaN, -kInf, -kInf}},
      {"ssim",
       [=] {
         return std::make_shared<km::SSIM>(5.0, std::vector<int64_t>{3}, std::vector<double>{1.5}, 0.01, 0.03, true,
                                           image);
       },
       nan3},
      {"average", [=] { return std::make_shared<km::Average>(column); }, Three{kNaN, kInf, -kInf}},
      {"geometric_average", [=] { return std::make_shared<km::GeometricAverage>(column); }, Three{kNaN, kInf, kNaN}},
      // ignite's VariableAccumulation only sums across ranks: these two as torch.maximum / minimum
      // give them, from the accumulator's 0.
      {"largest",
       [=] { return std::make_shared<km::VariableAccumulation>(extreme(true), column, cpu, dist::ReduceOp::kMax); },
       Three{kNaN, kInf, 4.0}},
      {"smallest",
       [=] { return std::make_shared<km::VariableAccumulation>(extreme(false), column, cpu, dist::ReduceOp::kMin); },
       Three{kNaN, 0.0, -kInf}},
      {"mmd", [=] { return std::make_shared<km::MaximumMeanDiscrepancy>(1.0, pairs); }, nan3},
  };
}

/// The metrics of logits: (N, 3) of y_pred, y and their difference, class i for row i (or
/// row i's item i relevant).
inline std::vector<NonFiniteCase> logit_cases() {
  namespace km = metrics;
  using engine::Value;
  const auto logits = [](const Value& o) {
    return Value::tuple({at::stack({o[0], o[1], o[0] - o[1]}, 1), at::arange(o[0].size(0))});
  };
  const auto flipped = [logits](const Value& o) {
    const at::Tensor l = logits(o)[0];
    return Value::tuple({l, l.flip(1)});
  };
  const auto relevant = [logits](const Value& o) {
    const Value l = logits(o);
    return Value::tuple({l[0], at::one_hot(l[1], 3)});
  };
  const auto softmaxed = [logits](const Value& o) { return Value(at::softmax(logits(o)[0], 1)); };
  const auto cross_entropy = [](const at::Tensor& p, const at::Tensor& y) { return at::cross_entropy_loss(p, y); };
  const Three nan3 = same3(kNaN);
  using PR = km::PrecisionRecallBase;
  using MAP = km::MeanAveragePrecision;
  return {
      {"entropy", [=] { return std::make_shared<km::Entropy>(logits); }, nan3},
      {"kl", [=] { return std::make_shared<km::KLDivergence>(flipped); }, nan3},
      {"js", [=] { return std::make_shared<km::JSDivergence>(flipped); }, nan3},
      {"mutual_information", [=] { return std::make_shared<km::MutualInformation>(logits); }, nan3},
      {"loss", [=] { return std::make_shared<km::Loss>(cross_entropy, logits); },
       Three{kNaN, kNaN, 1.3477112054824829}},
      {"perplexity", [=] { return std::make_shared<km::Perplexity>(logits); }, Three{kNaN, kNaN, 3.8486068248748779}},
      // argmax and topk rank NaN above every number, as torch's.
      {"accuracy", [=] { return std::make_shared<km::Accuracy>(logits); }, Three{0.375, 0.375, 0.5}},
      {"top2", [=] { return std::make_shared<km::TopKCategoricalAccuracy>(2, logits); }, Three{0.625, 0.625, 0.75}},
      {"precision_macro", [=] { return std::make_shared<km::Precision>(logits, PR::Average::kMacro); },
       Three{0.25, 0.25, 0.35555555555555557}},
      {"hit_rate", [=] { return std::make_shared<km::HitRate>(std::vector<int64_t>{2}, true, relevant); },
       Three{0.625, 0.625, 0.75}},
      {"ndcg",
       [=] {
         return std::make_shared<km::NDCG>(std::vector<int64_t>{2}, true, 1.0, km::NDCG::Gain::kExpRank, relevant);
       },
       Three{0.5327324271202087, 0.5327324271202087, 0.6577324271202087}},
      {"map", [=] { return std::make_shared<MAP>(std::nullopt, MAP::ClassMean::kMacro, false, logits); },
       Three{0.38743386243386241, 0.38743386243386241, 0.47354497354497349}},
      {"inception_score", [=] { return std::make_shared<km::InceptionScore>(3, km::FeatureExtractor(), softmaxed); },
       Three{kNaN, kNaN, 1.1828295072871389}},
  };
}

inline std::vector<NonFiniteCase> nonfinite_cases() {
  std::vector<NonFiniteCase> all = pair_cases();
  for (auto* more : {&shaped_cases, &logit_cases}) {
    for (NonFiniteCase& c : (*more)()) all.push_back(std::move(c));
  }
  return all;
}

/// Every case's value, by "<case>/<bad name>", with the batches of this rank: batch 1 (the bad
/// one) on rank `placement`, batches 0 and 2 on the next two ranks (modulo `world_size`).
inline std::map<std::string, std::string> evaluate_nonfinite(int rank, int world_size, int placement) {
  std::map<std::string, std::string> out;
  for (std::size_t v = 0; v < bad_values().size(); ++v) {
    engine::Engine evaluator([](engine::Engine&, const engine::Value& batch) { return batch; });
    for (const NonFiniteCase& c : nonfinite_cases()) c.make()->attach(evaluator, c.name + "/" + bad_name(v));
    std::vector<engine::Value> mine;
    for (int64_t b = 0; b < 3; ++b) {
      if ((placement + (b + 2) % 3) % world_size == rank) mine.push_back(nonfinite_batch(b, bad_values()[v]));
    }
    evaluator.run(mine, 1);
    out.merge(texts_of(evaluator.state().metrics));
  }
  return out;
}

}  // namespace testing
}  // namespace kindling
