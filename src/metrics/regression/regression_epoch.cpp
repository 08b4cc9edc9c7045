// The regression metrics over every sample (kindling/metrics/regression_epoch.h): compute
// functions in float64 over the samples EpochMetric gathers.
#include "kindling/metrics/regression_epoch.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>
#include <vector>

#include "metrics/regression/rank_correlation.h"
#include "kindling/error.h"
#include "metrics/regression/regression_checks.h"

namespace kindling {
namespace metrics {

namespace {

at::Tensor as_double(const at::Tensor& t) { return t.reshape({-1}).to(at::kDouble); }

// y_pred and y flattened to float64, refused unless they hold the same number of elements (> 0).
std::pair<at::Tensor, at::Tensor> flat_pair(const char* function, const at::Tensor& y_pred, const at::Tensor& y) {
  KINDLING_CHECK(y_pred.numel() == y.numel() && y.numel() > 0, "kindling::metrics::", function,
                 ": y_pred and y must hold the same number of elements, at least 1, but given ", y_pred.sizes(),
                 " and ", y.sizes());
  return {as_double(y_pred), as_double(y)};
}

// The median of a 1-D tensor as ignite's: of an even count, the mean of the middle two.
double median_of(const at::Tensor& values) {
  const at::Tensor sorted = std::get<0>(values.cpu().sort());
  const int64_t n = sorted.numel();
  const double upper = sorted[n / 2].item<double>();
  return n % 2 == 1 ? upper : 0.5 * (sorted[n / 2 - 1].item<double>() + upper);
}

// |y - y_pred| / |y - mean(y)|: the errors relative to those of predicting the mean.
at::Tensor relative_to_mean(const at::Tensor& y_pred, const at::Tensor& y) {
  const at::Tensor p = as_double(y_pred), t = as_double(y);
  return (t - p).abs() / (t - t.mean()).abs();
}

std::vector<double> to_vector(const at::Tensor& t) {
  const at::Tensor c = as_double(t).cpu().contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

Value median_absolute_error_value(const at::Tensor& y_pred, const at::Tensor& y) {
  return Value(median_absolute_error(y_pred, y));
}

Value median_absolute_percentage_error_value(const at::Tensor& y_pred, const at::Tensor& y) {
  return Value(median_absolute_percentage_error(y_pred, y));
}

Value median_relative_absolute_error_value(const at::Tensor& y_pred, const at::Tensor& y) {
  return Value(median_relative_absolute_error(y_pred, y));
}

Value geometric_mean_relative_absolute_error(const at::Tensor& y_pred, const at::Tensor& y) {
  return Value(std::exp(relative_to_mean(y_pred, y).log().mean().item<double>()));
}

Value spearman(const at::Tensor& y_pred, const at::Tensor& y) {
  return Value(::kindling::detail::spearman_rho(to_vector(y_pred), to_vector(y)));
}

}  // namespace

double median_absolute_error(const at::Tensor& y_pred, const at::Tensor& y) {
  const auto [p, t] = flat_pair("median_absolute_error", y_pred, y);
  return median_of((t - p).abs());
}

double median_absolute_percentage_error(const at::Tensor& y_pred, const at::Tensor& y) {
  const auto [p, t] = flat_pair("median_absolute_percentage_error", y_pred, y);
  return 100.0 * median_of((t - p).abs() / t.abs());
}

double median_relative_absolute_error(const at::Tensor& y_pred, const at::Tensor& y) {
  const auto [p, t] = flat_pair("median_relative_absolute_error", y_pred, y);
  return median_of(relative_to_mean(p, t));
}

RegressionEpochMetric::RegressionEpochMetric(ComputeFunction compute_fn, OutputTransform output_transform,
                                             bool check_compute_fn, c10::Device device)
    : EpochMetric(std::move(compute_fn), std::move(output_transform), check_compute_fn, device) {}

void RegressionEpochMetric::check_input(const at::Tensor& y_pred, const at::Tensor& y) const {
  ::kindling::detail::check_regression_pair(name(), y_pred, y);
}

MedianAbsoluteError::MedianAbsoluteError(OutputTransform output_transform, c10::Device device)
    : RegressionEpochMetric(median_absolute_error_value, std::move(output_transform), false, device) {}

MedianAbsolutePercentageError::MedianAbsolutePercentageError(OutputTransform output_transform, c10::Device device)
    : RegressionEpochMetric(median_absolute_percentage_error_value, std::move(output_transform), false, device) {}

void MedianAbsolutePercentageError::check_input(const at::Tensor& y_pred, const at::Tensor& y) const {
  RegressionEpochMetric::check_input(y_pred, y);
  ::kindling::detail::refuse_zero_targets(name(), y);
}

MedianRelativeAbsoluteError::MedianRelativeAbsoluteError(OutputTransform output_transform, c10::Device device)
    : RegressionEpochMetric(median_relative_absolute_error_value, std::move(output_transform), false, device) {}

GeometricMeanRelativeAbsoluteError::GeometricMeanRelativeAbsoluteError(OutputTransform output_transform,
                                                                       c10::Device device)
    : RegressionEpochMetric(geometric_mean_relative_absolute_error, std::move(output_transform), false, device) {}

SpearmanRankCorrelation::SpearmanRankCorrelation(OutputTransform output_transform, bool check_compute_fn,
                                                 c10::Device device)
    : RegressionEpochMetric(spearman, std::move(output_transform), check_compute_fn, device) {}

KendallRankCorrelation::KendallRankCorrelation(Variant variant, OutputTransform output_transform, bool check_compute_fn,
                                               c10::Device device)
    : RegressionEpochMetric(
          [variant](const at::Tensor& y_pred, const at::Tensor& y) {
            return Value(::kindling::detail::kendall_tau(to_vector(y_pred), to_vector(y), variant == Variant::kC));
          },
          std::move(output_transform), check_compute_fn, device),
      variant_(variant) {}

}  // namespace metrics
}  // namespace kindling
