// Entropy, KLDivergence, JSDivergence and MutualInformation (kindling/metrics/information.h):
// softmax over dimension 1 in float64, one value per sample (per position of a map).
#include "kindling/metrics/information.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace kindling {
namespace metrics {
namespace {

// Logits of shape (N, C, ...) as (samples, C) float64 rows: a map's positions become samples.
at::Tensor class_rows(const std::string& metric, const at::Tensor& logits, const char* what) {
  KINDLING_CHECK(logits.dim() >= 2, "kindling::metrics::", metric, ": ", what,
                 " must be logits of shape (N, C) or (N, C, ...), classes in dimension 1, but given ", logits.sizes());
  KINDLING_CHECK(at::isFloatingType(logits.scalar_type()), "kindling::metrics::", metric, ": ", what,
                 " must be floating point logits, but given ", logits.scalar_type());
  at::Tensor rows = logits.to(at::kDouble);
  if (rows.dim() > 2) rows = rows.movedim(1, -1).reshape({-1, logits.size(1)});
  return rows;
}

void check_same_shape(const std::string& metric, const at::Tensor& y_pred, const at::Tensor& y) {
  KINDLING_CHECK(y_pred.sizes() == y.sizes(), "kindling::metrics::", metric,
                 ": y_pred and y must be logits of the same shape, but given ", y_pred.sizes(), " and ", y.sizes());
}

// sum_c exp(log_p) * (log_p - log_q) per row: KL(p || q) from log-probabilities.
at::Tensor kl_rows(const at::Tensor& log_p, const at::Tensor& log_q) { return (log_p.exp() * (log_p - log_q)).sum(1); }

}  // namespace

Entropy::Entropy(OutputTransform output_transform, c10::Device device)
    : SampleMean("_sum_of_entropies", std::move(output_transform), device, /*uses_y=*/false) {}

at::Tensor Entropy::per_sample(const at::Tensor& y_pred, const at::Tensor&) const {
  const at::Tensor log_p = at::log_softmax(class_rows(name(), y_pred, "y_pred"), 1);
  return -(log_p.exp() * log_p).sum(1);
}

KLDivergence::KLDivergence(OutputTransform output_transform, c10::Device device)
    : SampleMean("_sum_of_kl", std::move(output_transform), device) {}

at::Tensor KLDivergence::per_sample(const at::Tensor& y_pred, const at::Tensor& y) const {
  check_same_shape(name(), y_pred, y);
  return kl_rows(at::log_softmax(class_rows(name(), y, "y"), 1),
                 at::log_softmax(class_rows(name(), y_pred, "y_pred"), 1));
}

JSDivergence::JSDivergence(OutputTransform output_transform, c10::Device device)
    : SampleMean("_sum_of_kl", std::move(output_transform), device) {
  scale_ = 0.5;
}

at::Tensor JSDivergence::per_sample(const at::Tensor& y_pred, const at::Tensor& y) const {
  check_same_shape(name(), y_pred, y);
  const at::Tensor log_p = at::log_softmax(class_rows(name(), y, "y"), 1);
  const at::Tensor log_q = at::log_softmax(class_rows(name(), y_pred, "y_pred"), 1);
  const at::Tensor log_m = ((log_p.exp() + log_q.exp()) / 2).log();
  return kl_rows(log_p, log_m) + kl_rows(log_q, log_m);  // halved at compute (scale_)
}

MutualInformation::MutualInformation(OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device) {
  register_state("_sum_of_probabilities", &sum_of_probabilities_, Reshard::kSum);
  register_state("_sum_of_entropies", &sum_of_entropies_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  MutualInformation::reset();
}

void MutualInformation::reset() {
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device());
  sum_of_probabilities_ = at::zeros({}, options);
  sum_of_entropies_ = at::zeros({}, options);
  num_examples_ = 0;
}

void MutualInformation::update(const Value& output) {
  const at::Tensor y_pred = output.is_tensor() ? output.tensor() : y_pred_and_y(output).first;
  const at::Tensor log_p = at::log_softmax(class_rows(name(), y_pred.detach(), "y_pred"), 1);
  const at::Tensor p = log_p.exp();
  KINDLING_CHECK(sum_of_probabilities_.dim() == 0 || sum_of_probabilities_.size(0) == p.size(1),
                 "kindling::metrics::MutualInformation: every batch must have the same number of classes; the "
                 "earlier ones had ",
                 sum_of_probabilities_.dim() == 0 ? 0 : sum_of_probabilities_.size(0), ", this one has ", p.size(1));
  sum_of_probabilities_ = sum_of_probabilities_ + p.sum(0).to(device());
  sum_of_entropies_ += (-(p * log_p).sum()).to(device());
  num_examples_ += p.size(0);
}

Value MutualInformation::compute() {
  const at::Tensor probabilities = reduce_to_shape(sum_of_probabilities_, sum_of_probabilities_.dim() > 0);
  const double entropies = reduce(sum_of_entropies_).item<double>();
  const int64_t n = reduce(num_examples_);
  if (n == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::MutualInformation must have at least one example before it can be "
                             "computed");
  }
  const at::Tensor marginal = probabilities / static_cast<double>(n);
  const double marginal_entropy = (-(marginal * marginal.log()).sum()).item<double>();
  // Clamped at 0 as ignite's torch.clamp, which keeps a NaN (std::max(0.0, NaN) would give 0):
  // a -inf or NaN logit makes the value NaN, as it makes Entropy's.
  const double information = marginal_entropy - entropies / static_cast<double>(n);
  return Value(std::isnan(information) ? information : std::max(0.0, information));
}

}  // namespace metrics
}  // namespace kindling
