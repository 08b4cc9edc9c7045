// MeanAveragePrecision (kindling/metrics/mean_average_precision.h): per class, precision and
// recall at each distinct score, their average precision, and the mean over classes.
#include "kindling/metrics/mean_average_precision.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace kindling {
namespace metrics {
namespace {

using ClassMean = MeanAveragePrecision::ClassMean;

// Recall and precision at each distinct score of one class, scores descending (ties as one
// threshold, the last of each run: scikit-learn's rule).
std::pair<at::Tensor, at::Tensor> recall_precision(const at::Tensor& truth, const at::Tensor& scores) {
  const at::Tensor order = std::get<1>(scores.sort(/*stable=*/true, 0, /*descending=*/true));
  const at::Tensor sorted = scores.index({order});
  const at::Tensor ends = at::nonzero(at::diff(sorted, 1, 0, {}, (sorted.max() + 1).unsqueeze(0))).squeeze(1);
  const at::Tensor tp = truth.index({order}).cumsum(0).to(at::kDouble).index({ends});
  const at::Tensor predicted = (ends + 1).to(at::kDouble);
  const double positives = truth.sum().item<double>();
  const at::Tensor recall = positives == 0 ? at::ones_like(tp) : tp / positives;
  return {recall, tp / predicted};
}

double average_precision(const at::Tensor& recall, const at::Tensor& precision, const at::Tensor& thresholds) {
  if (!thresholds.defined()) {
    const at::Tensor steps = at::diff(recall, 1, 0, at::zeros({1}, recall.options()), {});
    return (steps * precision).sum().item<double>();
  }
  // Precision where recall first reaches each threshold (0 past the last recall).
  const at::Tensor at_or_after = at::searchsorted(recall, thresholds);
  const int64_t n = recall.size(0);
  const at::Tensor read = precision.index({at_or_after.clamp_max(n - 1)}) * (at_or_after < n).to(at::kDouble);
  return (at::diff(thresholds, 1, 0, at::zeros({1}, thresholds.options()), {}) * read).sum().item<double>();
}

Value mean_average_precision(const at::Tensor& y_pred, const at::Tensor& y, bool multilabel, ClassMean mean,
                             const at::Tensor& thresholds) {
  at::Tensor scores, truth;  // (classes, samples)
  const bool multiclass = y_pred.dim() == 2 && y.dim() == 1;
  if (multiclass) {
    scores = y_pred.to(at::kDouble).t();
    truth = at::one_hot(y.to(at::kLong), y_pred.size(1)).t();
  } else if (multilabel) {
    scores = y_pred.to(at::kDouble).t();
    truth = y.to(at::kLong).t();
  } else {
    scores = y_pred.to(at::kDouble).reshape({1, -1});
    truth = y.to(at::kLong).reshape({1, -1});
  }
  if (mean == ClassMean::kMicro) scores = scores.reshape({1, -1}), truth = truth.reshape({1, -1});
  const int64_t classes = scores.size(0);
  at::Tensor ap = at::zeros({classes}, at::kDouble);
  for (int64_t c = 0; c < classes; ++c) {
    const auto [recall, precision] = recall_precision(truth[c], scores[c]);
    ap[c] = average_precision(recall, precision, thresholds);
  }
  if (!multiclass && !multilabel) return Value(ap[0].item<double>());
  if (mean == ClassMean::kNone) return Value(ap);
  if (mean == ClassMean::kWeighted) {
    const at::Tensor positives = truth.sum(1).to(at::kDouble);
    return Value(((positives * ap).sum() / positives.sum()).item<double>());
  }
  return Value(ap.mean().item<double>());
}

}  // namespace

MeanAveragePrecision::MeanAveragePrecision(std::optional<std::vector<double>> rec_thresholds, ClassMean class_mean,
                                           bool is_multilabel, OutputTransform output_transform, c10::Device device)
    : EpochMetric(
          [is_multilabel, class_mean,
           thresholds = rec_thresholds ? std::get<0>(at::tensor(*rec_thresholds, at::kDouble).sort()) : at::Tensor()](
              const at::Tensor& y_pred, const at::Tensor& y) {
            return mean_average_precision(y_pred, y, is_multilabel, class_mean, thresholds);
          },
          std::move(output_transform), false, device),
      is_multilabel_(is_multilabel) {
  for (double t : rec_thresholds.value_or(std::vector<double>{})) {
    KINDLING_CHECK(t >= 0 && t <= 1, "kindling::metrics::MeanAveragePrecision: rec_thresholds must lie in [0, 1], got ",
                   t);
  }
}

void MeanAveragePrecision::check_input(const at::Tensor& y_pred, const at::Tensor& y) const {
  KINDLING_CHECK(at::isFloatingType(y_pred.scalar_type()),
                 "kindling::metrics::MeanAveragePrecision: y_pred must be floating-point scores, but given ",
                 y_pred.scalar_type());
  const bool multiclass = y_pred.dim() == 2 && y.dim() == 1 && y_pred.size(0) == y.size(0);
  const bool same = y_pred.sizes() == y.sizes() && (!is_multilabel_ || y.dim() == 2);
  KINDLING_CHECK(multiclass || same,
                 "kindling::metrics::MeanAveragePrecision: y_pred and y must be (N,) and (N,) "
                 "(binary), (N, C) and (N,) (multiclass) or (N, C) and (N, C) (multilabel, is_multilabel), but given ",
                 y_pred.sizes(), " and ", y.sizes());
  if (multiclass) {
    KINDLING_CHECK(y.numel() == 0 || (y.min().item<int64_t>() >= 0 && y.max().item<int64_t>() < y_pred.size(1)),
                   "kindling::metrics::MeanAveragePrecision: labels must lie in [0, ", y_pred.size(1),
                   ") for scores of ", y_pred.size(1), " classes");
  } else {
    KINDLING_CHECK(at::equal(y, y * y),
                   "kindling::metrics::MeanAveragePrecision: y must hold 0's and 1's for binary and "
                   "multilabel input");
  }
}

}  // namespace metrics
}  // namespace kindling
