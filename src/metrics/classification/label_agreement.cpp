// CohenKappa and MatthewsCorrCoef (kindling/metrics/label_agreement.h): confusion matrices of
// all labels, in float64.
#include "kindling/metrics/label_agreement.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace kindling {
namespace metrics {

namespace {

// A batch may be empty (a rank without samples); all the labels of a computation may not.
void check_lengths(const char* function, const at::Tensor& y_pred, const at::Tensor& y, bool batch = false) {
  KINDLING_CHECK(y_pred.size(0) == y.size(0) && (batch || y.size(0) > 0), "kindling::metrics::", function,
                 ": y_pred and y must hold the same number of samples", batch ? "" : ", at least 1", ", but given ",
                 y_pred.sizes(), " and ", y.sizes());
}

// matthews_corrcoef's shapes: labels or scores for y_pred, labels or one-hot rows for y, not
// labels against one-hot rows (ignite's rule).
void check_label_kinds(const char* function, const at::Tensor& y_pred, const at::Tensor& y) {
  KINDLING_CHECK(!(y_pred.dim() == 1 && y.dim() == 2), "kindling::metrics::", function, ": y_pred holds labels ",
                 y_pred.sizes(), " while y holds one-hot rows ", y.sizes(),
                 "; give y as labels (N,), or y_pred as scores (N, C)");
}

// The (classes, classes) float64 counts of (row, column) index pairs.
at::Tensor pair_counts(const at::Tensor& rows, const at::Tensor& columns, int64_t classes) {
  return at::bincount(classes * rows + columns, {}, classes * classes).reshape({classes, classes}).to(at::kDouble);
}

double kappa_weight_sum(const at::Tensor& weights, const at::Tensor& counts) {
  return (weights * counts).sum().item<double>();
}

Value cohen_kappa_value(const at::Tensor& y_pred, const at::Tensor& y, KappaWeights weights,
                        std::optional<int64_t> classes) {
  return Value(cohen_kappa(y_pred, y, weights, classes));
}

}  // namespace

double cohen_kappa(const at::Tensor& y_pred, const at::Tensor& y, KappaWeights weights,
                   std::optional<int64_t> num_classes) {
  check_lengths("cohen_kappa", y_pred.reshape({-1}), y.reshape({-1}));
  const at::Tensor p = y_pred.reshape({-1}).to(at::kLong).cpu(), t = y.reshape({-1}).to(at::kLong).cpu();
  const int64_t largest = std::max(p.max().item<int64_t>(), t.max().item<int64_t>());
  const int64_t classes = num_classes.value_or(largest + 1);
  KINDLING_CHECK(largest < classes, "kindling::metrics::cohen_kappa: label ", largest,
                 " is not below num_classes = ", classes);
  const at::Tensor counts = pair_counts(t, p, classes);
  const double n = counts.sum().item<double>();
  const at::Tensor row = counts.sum(1), column = counts.sum(0);
  double observed = 0, expected = 0;
  if (weights == KappaWeights::kNone) {
    observed = counts.trace().item<double>() / n;
    expected = (row * column).sum().item<double>() / (n * n);
  } else {
    const at::Tensor index = at::arange(classes, at::kDouble);
    const at::Tensor gap = index.unsqueeze(0) - index.unsqueeze(1);
    at::Tensor w = weights == KappaWeights::kLinear ? gap.abs() : gap * gap;
    w = w / w.max();  // one class: 0 / 0, a NaN kappa as ignite's
    observed = 1 - kappa_weight_sum(w, counts) / n;
    expected = 1 - kappa_weight_sum(w, row.unsqueeze(1) * column.unsqueeze(0) / n) / n;
  }
  return (observed - expected) / std::max(1 - expected, 1e-9);
}

double matthews_corrcoef(const at::Tensor& y_pred, const at::Tensor& y) {
  check_label_kinds("matthews_corrcoef", y_pred, y);
  check_lengths("matthews_corrcoef", y_pred, y);
  const auto labels_of = [](const at::Tensor& t) {
    return (t.dim() == 2 ? t.argmax(1) : t.reshape({-1})).to(at::kDouble).cpu();
  };
  const at::Tensor p = labels_of(y_pred), t = labels_of(y);
  const at::Tensor present = std::get<0>(at::unique_consecutive(std::get<0>(at::cat({t, p}).sort())));
  const int64_t classes = present.numel();
  const at::Tensor counts = pair_counts(at::searchsorted(present, t), at::searchsorted(present, p), classes);
  const at::Tensor true_sum = counts.sum(1), pred_sum = counts.sum(0);
  const double n = counts.sum().item<double>(), correct = counts.trace().item<double>();
  const double cov_true_pred = correct * n - true_sum.dot(pred_sum).item<double>();
  const double cov_pred = n * n - pred_sum.dot(pred_sum).item<double>();
  const double cov_true = n * n - true_sum.dot(true_sum).item<double>();
  if (cov_pred * cov_true == 0) return 0.0;
  return cov_true_pred / std::sqrt(cov_true * cov_pred);
}

CohenKappa::CohenKappa(OutputTransform output_transform, Weights weights, bool check_compute_fn, c10::Device device,
                       std::optional<int64_t> num_classes)
    : EpochMetric(
          [weights, num_classes](const at::Tensor& y_pred, const at::Tensor& y) {
            return cohen_kappa_value(y_pred, y, weights, num_classes);
          },
          std::move(output_transform), check_compute_fn, device),
      weights_(weights),
      num_classes_(num_classes) {
  KINDLING_CHECK(!num_classes || *num_classes >= 2,
                 "kindling::metrics::CohenKappa: num_classes must be at least 2, got ", num_classes.value_or(0),
                 "; leave it out to take 1 + the largest label seen");
}

void CohenKappa::check_input(const at::Tensor& y_pred, const at::Tensor& y) const {
  const auto check = [this](const at::Tensor& t, const char* what) {
    KINDLING_CHECK(t.dim() == 1, "kindling::metrics::CohenKappa: multilabel-indicator is not supported: ", what,
                   " must be class indices of shape (N,) or (N, 1), but given ", t.sizes());
    if (t.numel() == 0) return;
    KINDLING_CHECK(!at::isFloatingType(t.scalar_type()) || at::equal(t, t.floor()),
                   "kindling::metrics::CohenKappa: ", what, " must hold whole class indices, but holds fractions (",
                   t.scalar_type(), "); take the argmax of scores first");
    const double smallest = t.min().item<double>(), largest = t.max().item<double>();
    KINDLING_CHECK(smallest >= 0, "kindling::metrics::CohenKappa: ", what, " holds the label ", smallest,
                   "; class indices start at 0");
    KINDLING_CHECK(!num_classes_ || largest < static_cast<double>(*num_classes_),
                   "kindling::metrics::CohenKappa: ", what, " holds the label ", largest,
                   ", not below num_classes = ", num_classes_.value_or(0));
  };
  check(y_pred, "y_pred");
  check(y, "y");
  check_lengths("CohenKappa", y_pred, y, /*batch=*/true);
}

MatthewsCorrCoef::MatthewsCorrCoef(OutputTransform output_transform, bool check_compute_fn, c10::Device device)
    : EpochMetric([](const at::Tensor& y_pred, const at::Tensor& y) { return Value(matthews_corrcoef(y_pred, y)); },
                  std::move(output_transform), check_compute_fn, device) {}

void MatthewsCorrCoef::check_input(const at::Tensor& y_pred, const at::Tensor& y) const {
  check_label_kinds("MatthewsCorrCoef", y_pred, y);
  check_lengths("MatthewsCorrCoef", y_pred, y, /*batch=*/true);
}

}  // namespace metrics
}  // namespace kindling
