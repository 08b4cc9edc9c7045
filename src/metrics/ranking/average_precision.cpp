// AveragePrecision and PrecisionRecallCurve: compute functions over the whole epoch's samples
// (run on rank 0 by EpochMetric), from the counts at each distinct threshold
// (ranking_curve.h).
#include "kindling/metrics/average_precision.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "kindling/log.h"
#include "metrics/ranking/ranking_curve.h"

namespace kindling {
namespace metrics {

namespace {

using ::kindling::detail::RankingColumn;
using ::kindling::detail::RankingCounts;

// scikit-learn's step sum over thresholds, highest first: (R_n - R_{n-1}) * P_n, with
// R_n - R_{n-1} = (tps[n] - tps[n-1]) / positives and P_n = tps[n] / (tps[n] + fps[n]). The
// positives of a run of tied scores all enter at the precision of the whole run.
double ap_step_sum(const RankingCounts& c) {
  const at::Tensor before = at::cat({at::zeros({1}, c.tps.options()), c.tps.slice(0, 0, -1)});
  const at::Tensor precision = c.tps / (c.tps + c.fps);
  return ((c.tps - before) * precision).sum().item<double>() / c.positives;
}

Value average_precision_of(const at::Tensor& y_pred, const at::Tensor& y, RankingMetric::Average average,
                           const std::string& who) {
  const auto task = ::kindling::detail::ranking_task(y_pred, y, who, false, /*check_values=*/true);
  std::vector<double> values, positives;
  std::string without;  // the problems without a positive sample, for one warning
  for (const RankingColumn& column :
       ::kindling::detail::ranking_columns(y_pred, y, task, average == RankingMetric::Average::kMicro)) {
    const RankingCounts c = ::kindling::detail::ranking_counts(column.scores, column.positive);
    if (c.positives == 0) without += (without.empty() ? "" : ", ") + (column.what.empty() ? "y" : column.what);
    values.push_back(c.positives == 0 ? 0.0 : ap_step_sum(c));
    positives.push_back(c.positives);
  }
  if (!without.empty()) {
    kindling::log(LogLevel::kWarning, who + ": no positive sample in " + without +
                                          ", so the average precision there counts as 0 (as scikit-learn's "
                                          "average_precision_score); check the targets if that is unexpected");
  }
  return ::kindling::detail::ranking_average(values, positives, average);
}

// (precision, recall, thresholds) over every distinct score, increasing, then (1, 0), as
// scikit-learn's precision_recall_curve (>= 1.1).
Value precision_recall_curve_of(const at::Tensor& y_pred, const at::Tensor& y, const std::string& who) {
  const auto task = ::kindling::detail::ranking_task(y_pred, y, who, true, /*check_values=*/true);
  const RankingColumn column = ::kindling::detail::ranking_columns(y_pred, y, task, false).at(0);
  const RankingCounts c = ::kindling::detail::ranking_counts(column.scores, column.positive);
  const at::Tensor precision = c.tps / (c.tps + c.fps);  // every threshold has a sample: no 0 / 0
  at::Tensor recall;
  if (c.positives > 0) {
    recall = c.tps / c.positives;
  } else {
    kindling::log(LogLevel::kWarning, who +
                                          ": y has no positive sample, so recall is set to 1 at every threshold (as "
                                          "scikit-learn's precision_recall_curve)");
    recall = at::ones_like(c.tps);
  }
  return Value::tuple({at::cat({precision.flip(0), at::ones({1}, precision.options())}),
                       at::cat({recall.flip(0), at::zeros({1}, recall.options())}), c.thresholds.flip(0)});
}

}  // namespace

AveragePrecision::AveragePrecision(OutputTransform output_transform, Average average, bool check_compute_fn,
                                   c10::Device device)
    : RankingMetric(
          [average](const at::Tensor& p, const at::Tensor& y) {
            return average_precision_of(p, y, average, "kindling::metrics::AveragePrecision");
          },
          /*binary_only=*/false, std::move(output_transform), check_compute_fn, device),
      average_(average) {}

PrecisionRecallCurve::PrecisionRecallCurve(OutputTransform output_transform, bool check_compute_fn, c10::Device device)
    : RankingMetric(
          [](const at::Tensor& p, const at::Tensor& y) {
            return precision_recall_curve_of(p, y, "kindling::metrics::PrecisionRecallCurve");
          },
          /*binary_only=*/true, std::move(output_transform), check_compute_fn, device) {}

Value average_precision_compute_fn(const at::Tensor& y_preds, const at::Tensor& y_targets) {
  return average_precision_of(y_preds, y_targets, RankingMetric::Average::kMacro,
                              "kindling::metrics::average_precision_compute_fn");
}

Value precision_recall_curve_compute_fn(const at::Tensor& y_preds, const at::Tensor& y_targets) {
  return precision_recall_curve_of(y_preds, y_targets, "kindling::metrics::precision_recall_curve_compute_fn");
}

}  // namespace metrics
}  // namespace kindling
