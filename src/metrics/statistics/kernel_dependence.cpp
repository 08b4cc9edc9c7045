// HSIC and MaximumMeanDiscrepancy (kindling/metrics/kernel_dependence.h): Gaussian kernel
// estimates per batch in float64, their terms summed with the batch count.
#include "kindling/metrics/kernel_dependence.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace kindling {
namespace metrics {
namespace {

// Squared Euclidean distances between the rows of a and those of b, as a Gram expansion.
at::Tensor squared_distances(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor aa = (a * a).sum(1), bb = (b * b).sum(1);
  return aa.unsqueeze(1) + bb.unsqueeze(0) - 2 * at::mm(a, b.t());
}

// The Gaussian Gram matrix of x's rows with the diagonal zeroed; sigma < 0: the median of
// the squared distances (diagonal included, linear interpolation) is the variance.
at::Tensor gram_without_diagonal(const at::Tensor& x, double sigma) {
  const at::Tensor d = squared_distances(x, x);
  const at::Tensor variance = sigma < 0 ? at::quantile(d, 0.5) : at::full({}, sigma * sigma, d.options());
  return at::exp(-0.5 * d / variance) * (1 - at::eye(x.size(0), d.options()));
}

}  // namespace

BatchMean::BatchMean(std::vector<std::string> keys, OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device), sums_(keys.size()) {
  for (std::size_t i = 0; i < keys.size(); ++i) register_state(keys[i], &sums_[i], Reshard::kSum);
  register_state("_num_batches", &num_batches_, Reshard::kSum);
  BatchMean::reset();
}

void BatchMean::reset() {
  for (auto& s : sums_) s = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_batches_ = 0;
}

void BatchMean::update(const Value& output) {
  const auto [y_pred, y] = y_pred_and_y(output);
  KINDLING_CHECK(y_pred.dim() >= 2 && y.dim() >= 2, "kindling::metrics::", name(),
                 ": the two inputs must have shape (B, ...), a sample per row, but given ", y_pred.sizes(), " and ",
                 y.sizes());
  KINDLING_CHECK(y_pred.size(0) == y.size(0), "kindling::metrics::", name(),
                 ": the two inputs must hold the same number of samples, but given ", y_pred.sizes(), " and ",
                 y.sizes());
  const std::vector<at::Tensor> terms =
      batch_terms(y_pred.detach().flatten(1).to(at::kDouble), y.detach().flatten(1).to(at::kDouble));
  if (terms.empty()) return;
  for (std::size_t i = 0; i < sums_.size(); ++i) sums_[i] += terms[i].to(device());
  ++num_batches_;
}

Value BatchMean::compute() {
  const at::Tensor sums = reduce(at::stack(sums_)).cpu();
  const int64_t batches = reduce(num_batches_);
  if (batches == 0) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name() +
                             " must have at least one batch before it can be computed");
  }
  std::vector<double> values(sums_.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = sums[static_cast<int64_t>(i)].item<double>();
  return Value(combine(values, batches));
}

HSIC::HSIC(double sigma_x, double sigma_y, bool ignore_invalid_batch, OutputTransform output_transform,
           c10::Device device)
    : BatchMean({"_sum_of_hsic"}, std::move(output_transform), device),
      sigma_x_(sigma_x),
      sigma_y_(sigma_y),
      ignore_invalid_batch_(ignore_invalid_batch) {}

std::vector<at::Tensor> HSIC::batch_terms(const at::Tensor& x, const at::Tensor& y) const {
  const int64_t b = x.size(0);
  if (b < 4) {
    KINDLING_CHECK(ignore_invalid_batch_, "kindling::metrics::HSIC: a batch must hold at least 4 samples, got ", b,
                   " (construct HSIC with ignore_invalid_batch = true to skip such batches)");
    return {};
  }
  const at::Tensor k = gram_without_diagonal(x, sigma_x_), l = gram_without_diagonal(y, sigma_y_);
  const at::Tensor kl = at::mm(k, l);
  const double n = static_cast<double>(b);
  const at::Tensor estimate =
      (kl.trace() + k.sum() * l.sum() / ((n - 1) * (n - 2)) - 2 * kl.sum() / (n - 2)) / (n * (n - 3));
  return {estimate.clamp_min(0)};  // each batch's estimate clamped at 0, as ignite 0.5.5
}

double HSIC::combine(const std::vector<double>& sums, int64_t batches) const {
  return sums[0] / static_cast<double>(batches);
}

MaximumMeanDiscrepancy::MaximumMeanDiscrepancy(double var, OutputTransform output_transform, c10::Device device)
    : BatchMean({"_xx_sum", "_yy_sum", "_xy_sum"}, std::move(output_transform), device), var_(var) {
  KINDLING_CHECK(var > 0 && std::isfinite(var),
                 "kindling::metrics::MaximumMeanDiscrepancy: var (the kernel's bandwidth) must be a positive number, "
                 "got ",
                 var);
}

std::vector<at::Tensor> MaximumMeanDiscrepancy::batch_terms(const at::Tensor& x, const at::Tensor& y) const {
  KINDLING_CHECK(x.sizes() == y.sizes(),
                 "kindling::metrics::MaximumMeanDiscrepancy: x and y must have the same shape, "
                 "but given ",
                 x.sizes(), " and ", y.sizes(), " (flattened from dimension 1)");
  const int64_t b = x.size(0);
  KINDLING_CHECK(b >= 2, "kindling::metrics::MaximumMeanDiscrepancy: a batch must hold at least 2 samples, got ", b);
  const auto kernel_sum = [this](const at::Tensor& a, const at::Tensor& c) {
    return at::exp(-0.5 * squared_distances(a, c) / var_).sum();
  };
  const double n = static_cast<double>(b);
  return {(kernel_sum(x, x) - n) / (n * (n - 1)), (kernel_sum(y, y) - n) / (n * (n - 1)), kernel_sum(x, y) / (n * n)};
}

double MaximumMeanDiscrepancy::combine(const std::vector<double>& sums, int64_t batches) const {
  // Clamped at 0 as ignite's clamp(min=0.0), which keeps a NaN (a NaN or inf in x or y).
  const double squared = sums[0] + sums[1] - 2 * sums[2];
  return std::sqrt((std::isnan(squared) ? squared : std::max(0.0, squared)) / static_cast<double>(batches));
}

}  // namespace metrics
}  // namespace kindling
