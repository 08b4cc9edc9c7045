// MeanSquaredError, MeanAbsoluteError, RootMeanSquaredError: a float64 error sum and a row
// count, summed over ranks at compute.
#include "kindling/metrics/regression.h"

#include <ATen/ATen.h>

#include <cmath>

namespace kindling {
namespace metrics {

namespace {

// y viewed as y_pred's shape (ignite's y.view_as(y_pred)), after the checks.
at::Tensor checked_target(const std::string& name, const at::Tensor& y_pred, const at::Tensor& y) {
  KINDLING_CHECK(y.dim() >= 1, "kindling::metrics::", name,
                 ": y must have shape (batch_size, ...), but it is a "
                 "0-dim tensor");
  KINDLING_CHECK(y_pred.numel() == y.numel(), "kindling::metrics::", name,
                 ": y_pred and y must have the same shape, "
                 "but given ",
                 y_pred.sizes(), " vs ", y.sizes());
  return y.reshape(y_pred.sizes()).to(y_pred.device());
}

at::Tensor zero(c10::Device device) { return at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device)); }

double mean_of(const std::string& name, const at::Tensor& sum, int64_t examples) {
  if (examples == 0) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name +
                             " must have at least one example before it can be computed");
  }
  return sum.item<double>() / static_cast<double>(examples);
}

}  // namespace

MeanSquaredError::MeanSquaredError(OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device) {
  register_state("_sum", &sum_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  reset();
}

void MeanSquaredError::reset() {
  sum_ = zero(device());
  num_examples_ = 0;
}

void MeanSquaredError::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  y_pred = y_pred.detach();
  y = y.detach();
  const at::Tensor errors = at::pow(y_pred - checked_target(name(), y_pred, y), 2);
  sum_ += errors.sum().to(sum_.options());
  num_examples_ += y.size(0);
}

Value MeanSquaredError::compute() {
  const at::Tensor sum = reduce(sum_);
  const int64_t examples = reduce(num_examples_);
  return mean_of(name(), sum, examples);
}

MeanAbsoluteError::MeanAbsoluteError(OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device) {
  register_state("_sum", &sum_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  reset();
}

void MeanAbsoluteError::reset() {
  sum_ = zero(device());
  num_examples_ = 0;
}

void MeanAbsoluteError::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  y_pred = y_pred.detach();
  y = y.detach();
  const at::Tensor errors = at::abs(y_pred - checked_target(name(), y_pred, y));
  sum_ += errors.sum().to(sum_.options());
  num_examples_ += y.size(0);
}

Value MeanAbsoluteError::compute() {
  const at::Tensor sum = reduce(sum_);
  const int64_t examples = reduce(num_examples_);
  return mean_of(name(), sum, examples);
}

RootMeanSquaredError::RootMeanSquaredError(OutputTransform output_transform, c10::Device device)
    : MeanSquaredError(std::move(output_transform), device) {}

Value RootMeanSquaredError::compute() { return std::sqrt(MeanSquaredError::compute().number()); }

}  // namespace metrics
}  // namespace kindling
