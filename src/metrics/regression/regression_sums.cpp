// The sum-based regression metrics (kindling/metrics/regression_sums.h): float64 sums of
// per-sample terms and a row count, summed over ranks at compute.
#include "kindling/metrics/regression_sums.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "metrics/regression/regression_checks.h"

namespace kindling {
namespace metrics {

namespace {

// y_pred and y as ignite's regression metrics take them (regression_checks.h), returned as
// (N,) float64 on `device`.
std::pair<at::Tensor, at::Tensor> regression_input(const std::string& name, std::pair<at::Tensor, at::Tensor> pair,
                                                   c10::Device device) {
  ::kindling::detail::check_regression_pair(name, pair.first, pair.second);
  const auto column = [&](const at::Tensor& t) { return t.detach().reshape({-1}).to(device, at::kDouble); };
  return {column(pair.first), column(pair.second)};
}

const std::vector<std::string> kSumOfErrors{"_sum_of_errors"};

}  // namespace

RegressionSums::RegressionSums(std::vector<std::string> keys, std::string rows_key, OutputTransform output_transform,
                               c10::Device device)
    : Metric(std::move(output_transform), device), sums_(keys.size()) {
  for (std::size_t k = 0; k < keys.size(); ++k) register_state(keys[k], &sums_[k], Reshard::kSum);
  if (!rows_key.empty()) register_state(rows_key, &rows_, Reshard::kSum);
  RegressionSums::reset();
}

void RegressionSums::reset() {
  for (at::Tensor& sum : sums_) sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  rows_ = 0;
}

void RegressionSums::update(const Value& output) {
  const auto [y_pred, y] = regression_input(name(), y_pred_and_y(output), device());
  const std::vector<at::Tensor> batch = terms(y_pred, y);  // may refuse the batch: nothing stored yet
  for (std::size_t k = 0; k < sums_.size(); ++k) sums_[k] += batch[k].sum();
  rows_ += y.size(0);
}

std::vector<double> RegressionSums::reduced_sums(int64_t& rows, bool need_rows) const {
  rows = reduce(rows_);
  if (need_rows && rows == 0) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name() +
                             " must have at least one example before it can be computed");
  }
  const at::Tensor all = reduce(at::stack(sums_)).cpu();  // one collective for every sum
  std::vector<double> out;
  for (int64_t k = 0; k < all.size(0); ++k) out.push_back(all[k].item<double>());
  return out;
}

double RegressionSums::reduced_mean() const {
  int64_t rows = 0;
  const double sum = reduced_sums(rows)[0];
  return sum / static_cast<double>(rows);
}

double RegressionSums::reduced_total() const {
  int64_t rows = 0;
  return reduced_sums(rows, false)[0];
}

CanberraMetric::CanberraMetric(OutputTransform output_transform, c10::Device device)
    : RegressionSums(kSumOfErrors, "", std::move(output_transform), device) {}
std::vector<at::Tensor> CanberraMetric::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  return {(y - y_pred).abs() / (y_pred.abs() + y.abs() + 1e-15)};
}
Value CanberraMetric::compute() { return reduced_total(); }

FractionalAbsoluteError::FractionalAbsoluteError(OutputTransform output_transform, c10::Device device)
    : RegressionSums(kSumOfErrors, "_num_examples", std::move(output_transform), device) {}
std::vector<at::Tensor> FractionalAbsoluteError::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  return {2 * (y - y_pred).abs() / (y_pred.abs() + y.abs())};
}
Value FractionalAbsoluteError::compute() { return reduced_mean(); }

FractionalBias::FractionalBias(OutputTransform output_transform, c10::Device device)
    : RegressionSums(kSumOfErrors, "_num_examples", std::move(output_transform), device) {}
std::vector<at::Tensor> FractionalBias::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  return {2 * (y - y_pred) / (y_pred + y + 1e-30)};
}
Value FractionalBias::compute() { return reduced_mean(); }

GeometricMeanAbsoluteError::GeometricMeanAbsoluteError(OutputTransform output_transform, c10::Device device)
    : RegressionSums(kSumOfErrors, "_num_examples", std::move(output_transform), device) {}
std::vector<at::Tensor> GeometricMeanAbsoluteError::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  return {(y - y_pred).abs().log()};
}
Value GeometricMeanAbsoluteError::compute() { return std::exp(reduced_mean()); }

ManhattanDistance::ManhattanDistance(OutputTransform output_transform, c10::Device device)
    : RegressionSums(kSumOfErrors, "", std::move(output_transform), device) {}
std::vector<at::Tensor> ManhattanDistance::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  return {(y - y_pred).abs()};
}
Value ManhattanDistance::compute() { return reduced_total(); }

MeanAbsoluteRelativeError::MeanAbsoluteRelativeError(OutputTransform output_transform, c10::Device device)
    : RegressionSums({"_sum_of_absolute_relative_errors"}, "_num_samples", std::move(output_transform), device) {}
std::vector<at::Tensor> MeanAbsoluteRelativeError::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  ::kindling::detail::refuse_zero_targets(name(), y);
  return {(y_pred - y).abs() / y.abs()};
}
Value MeanAbsoluteRelativeError::compute() { return reduced_mean(); }

MeanError::MeanError(OutputTransform output_transform, c10::Device device)
    : RegressionSums(kSumOfErrors, "_num_examples", std::move(output_transform), device) {}
std::vector<at::Tensor> MeanError::terms(const at::Tensor& y_pred, const at::Tensor& y) const { return {y - y_pred}; }
Value MeanError::compute() { return reduced_mean(); }

MeanNormalizedBias::MeanNormalizedBias(OutputTransform output_transform, c10::Device device)
    : RegressionSums(kSumOfErrors, "_num_examples", std::move(output_transform), device) {}
std::vector<at::Tensor> MeanNormalizedBias::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  ::kindling::detail::refuse_zero_targets(name(), y);
  return {(y - y_pred) / y};
}
Value MeanNormalizedBias::compute() { return reduced_mean(); }

WaveHedgesDistance::WaveHedgesDistance(OutputTransform output_transform, c10::Device device)
    : RegressionSums(kSumOfErrors, "", std::move(output_transform), device) {}
std::vector<at::Tensor> WaveHedgesDistance::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  return {(y - y_pred).abs() / (at::maximum(y_pred, y) + 1e-30)};
}
Value WaveHedgesDistance::compute() { return reduced_total(); }

R2Score::R2Score(OutputTransform output_transform, c10::Device device)
    : RegressionSums({"_sum_of_errors", "_y_sum", "_y_sq_sum"}, "_num_examples", std::move(output_transform), device) {}
std::vector<at::Tensor> R2Score::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  return {(y_pred - y).pow(2), y, y.pow(2)};
}
Value R2Score::compute() {
  int64_t rows = 0;
  const std::vector<double> s = reduced_sums(rows);
  return 1 - s[0] / (s[2] - s[1] * s[1] / static_cast<double>(rows));
}

PearsonCorrelation::PearsonCorrelation(double eps, OutputTransform output_transform, c10::Device device)
    : RegressionSums(
          {"_sum_of_y_preds", "_sum_of_ys", "_sum_of_y_pred_squares", "_sum_of_y_squares", "_sum_of_products"},
          "_num_examples", std::move(output_transform), device),
      eps_(eps) {}
std::vector<at::Tensor> PearsonCorrelation::terms(const at::Tensor& y_pred, const at::Tensor& y) const {
  return {y_pred, y, y_pred.square(), y.square(), y_pred * y};
}
Value PearsonCorrelation::compute() {
  int64_t rows = 0;
  const std::vector<double> s = reduced_sums(rows);
  const double n = static_cast<double>(rows);
  const double cov = s[4] / n - s[0] * s[1] / (n * n);
  const double pred_mean = s[0] / n, y_mean = s[1] / n;
  const double pred_var = std::max(s[2] / n - pred_mean * pred_mean, 0.0);
  const double y_var = std::max(s[3] / n - y_mean * y_mean, 0.0);
  return cov / std::max(std::sqrt(pred_var * y_var), eps_);
}

MaximumAbsoluteError::MaximumAbsoluteError(OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device) {
  register_state("_max_of_absolute_errors", &max_, Reshard::kMax);
  MaximumAbsoluteError::reset();
}

void MaximumAbsoluteError::reset() {
  max_ = at::full({}, -1.0, at::TensorOptions().dtype(at::kDouble).device(device()));
}

void MaximumAbsoluteError::update(const Value& output) {
  const auto [y_pred, y] = regression_input(name(), y_pred_and_y(output), device());
  KINDLING_CHECK(y.numel() > 0, "kindling::metrics::", name(),
                 ": a batch must hold at least one sample (ignite refuses an empty one too), but given y_pred and y "
                 "of shape ",
                 y.sizes(), "; leave empty batches out of this metric");
  // ignite keeps a batch's maximum only when it is larger than the one so far: a batch whose
  // maximum is NaN (a NaN anywhere in it) is skipped, on every rank alike, so the state never
  // holds a NaN and the maximum over ranks does not depend on where that batch was.
  const at::Tensor batch_max = (y_pred - y).abs().max();
  if (!batch_max.isnan().item<bool>()) max_ = at::maximum(max_, batch_max);
}

Value MaximumAbsoluteError::compute() {
  const double largest = reduce(max_, dist::ReduceOp::kMax).item<double>();
  if (largest < 0) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name() +
                             " must have at least one example before it can be computed");
  }
  return largest;
}

}  // namespace metrics
}  // namespace kindling
