// ROC_AUC and RocCurve: compute functions over the whole epoch's samples (run on rank 0 by
// EpochMetric), from the counts at each distinct threshold (ranking_curve.h).
#include "kindling/metrics/roc_auc.h"

#include <ATen/ATen.h>

#include <limits>
#include <string>
#include <vector>

#include "kindling/log.h"
#include "metrics/ranking/ranking_curve.h"

namespace kindling {
namespace metrics {

namespace {

using ::kindling::detail::RankingColumn;
using ::kindling::detail::RankingCounts;

// The area under the ROC curve of one problem. The trapezoids between the points (0, 0) and
// (fps[i], tps[i]) of each threshold are summed in counts, which are integers (a run of tied
// scores holding positives and negatives is one slanted segment: the half credit of a tie),
// and divided once by 2 * positives * negatives: the Mann-Whitney statistic, to rounding.
double roc_area(const RankingCounts& c) {
  const at::Tensor zero = at::zeros({1}, c.tps.options());
  const at::Tensor tp = at::cat({zero, c.tps}), fp = at::cat({zero, c.fps});
  const at::Tensor width = fp.slice(0, 1) - fp.slice(0, 0, -1);
  const at::Tensor twice_height = tp.slice(0, 1) + tp.slice(0, 0, -1);
  return (width * twice_height).sum().item<double>() / (2.0 * c.positives * c.negatives);
}

[[noreturn]] void roc_undefined(const RankingColumn& column, const RankingCounts& c, const std::string& who) {
  const std::string only = c.positives == 0 ? "negative" : "positive";
  const std::string count = std::to_string(static_cast<int64_t>(c.positives + c.negatives));
  const std::string what =
      column.what.empty()
          ? "only one class is present in y (all " + count + " targets are " + (c.positives == 0 ? "0" : "1") + ")"
          : column.what + " has no " + (c.positives == 0 ? "positive" : "negative") + " sample (all " + count +
                " samples are " + only + "s of it)";
  throw NotComputableError(::kindling::detail::rank_prefix() + who + ": " + what +
                           ", so ROC AUC is not defined for it (scikit-learn raises ValueError there); compute it "
                           "over data holding both classes (an epoch-wise usage gathers the whole epoch), or " +
                           (column.what.empty() ? std::string("check the targets")
                                                : "leave that class out with output_transform, or use "
                                                  "Average::kMicro"));
}

Value roc_auc_of(const at::Tensor& y_pred, const at::Tensor& y, RankingMetric::Average average,
                 const std::string& who) {
  const auto task = ::kindling::detail::ranking_task(y_pred, y, who, false, /*check_values=*/true);
  std::vector<double> values, positives;
  for (const RankingColumn& column :
       ::kindling::detail::ranking_columns(y_pred, y, task, average == RankingMetric::Average::kMicro)) {
    const RankingCounts c = ::kindling::detail::ranking_counts(column.scores, column.positive);
    if (c.positives == 0 || c.negatives == 0) roc_undefined(column, c, who);
    values.push_back(roc_area(c));
    positives.push_back(c.positives);
  }
  return ::kindling::detail::ranking_average(values, positives, average);
}

// scikit-learn's roc_curve(drop_intermediate=True): the thresholds whose point lies on the
// straight line between its neighbours' (both counts' second differences 0) are left out;
// the first and the last stay.
void drop_collinear(RankingCounts& c) {
  if (c.tps.size(0) <= 2) return;
  auto bends = [](const at::Tensor& t) { return t.slice(0, 2) - 2 * t.slice(0, 1, -1) + t.slice(0, 0, -2) != 0; };
  const at::Tensor end = at::ones({1}, c.tps.options().dtype(at::kBool));
  const at::Tensor kept = at::cat({end, bends(c.fps) | bends(c.tps), end}).nonzero().squeeze(1);
  c.tps = c.tps.index_select(0, kept);
  c.fps = c.fps.index_select(0, kept);
  c.thresholds = c.thresholds.index_select(0, kept);
}

// (fpr, tpr, thresholds) with a first point at +infinity, as scikit-learn's roc_curve.
Value roc_curve_of(const at::Tensor& y_pred, const at::Tensor& y, bool drop_intermediate, const std::string& who) {
  const auto task = ::kindling::detail::ranking_task(y_pred, y, who, true, /*check_values=*/true);
  const RankingColumn column = ::kindling::detail::ranking_columns(y_pred, y, task, false).at(0);
  RankingCounts c = ::kindling::detail::ranking_counts(column.scores, column.positive);
  if (drop_intermediate) drop_collinear(c);
  const at::Tensor zero = at::zeros({1}, c.tps.options());
  auto rate = [&](const at::Tensor& counts, double total, const char* name, const char* missing) {
    if (total > 0) return at::cat({zero, counts}) / total;
    kindling::log(LogLevel::kWarning, who + ": y has no " + missing + " sample, so the " + name +
                                          " is not defined: it is NaN at every threshold (as scikit-learn's "
                                          "roc_curve)");
    return at::full({counts.size(0) + 1}, std::numeric_limits<double>::quiet_NaN(), c.tps.options());
  };
  const at::Tensor fpr = rate(c.fps, c.negatives, "false positive rate", "negative");
  const at::Tensor tpr = rate(c.tps, c.positives, "true positive rate", "positive");
  const at::Tensor infinity = at::full({1}, std::numeric_limits<double>::infinity(), c.thresholds.options());
  return Value::tuple({fpr, tpr, at::cat({infinity, c.thresholds})});
}

}  // namespace

ROC_AUC::ROC_AUC(OutputTransform output_transform, Average average, bool check_compute_fn, c10::Device device)
    : RankingMetric([average](const at::Tensor& p,
                              const at::Tensor& y) { return roc_auc_of(p, y, average, "kindling::metrics::ROC_AUC"); },
                    /*binary_only=*/false, std::move(output_transform), check_compute_fn, device),
      average_(average) {}

RocCurve::RocCurve(OutputTransform output_transform, bool check_compute_fn, c10::Device device)
    : RankingMetric([](const at::Tensor& p,
                       const at::Tensor& y) { return roc_curve_of(p, y, false, "kindling::metrics::RocCurve"); },
                    /*binary_only=*/true, std::move(output_transform), check_compute_fn, device) {}

Value roc_auc_compute_fn(const at::Tensor& y_preds, const at::Tensor& y_targets) {
  return roc_auc_of(y_preds, y_targets, RankingMetric::Average::kMacro, "kindling::metrics::roc_auc_compute_fn");
}

Value roc_auc_curve_compute_fn(const at::Tensor& y_preds, const at::Tensor& y_targets) {
  return roc_curve_of(y_preds, y_targets, true, "kindling::metrics::roc_auc_curve_compute_fn");
}

}  // namespace metrics
}  // namespace kindling
