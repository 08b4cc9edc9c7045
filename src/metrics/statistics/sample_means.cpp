// CosineSimilarity, MeanPairwiseDistance and PSNR (kindling/metrics/sample_means.h): a float64
// sum of one value per sample and the sample count, summed over ranks at compute.
#include "kindling/metrics/sample_means.h"

#include <ATen/ATen.h>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

namespace kindling {
namespace metrics {

SampleMean::SampleMean(const std::string& sum_key, OutputTransform output_transform, c10::Device device, bool uses_y)
    : Metric(std::move(output_transform), device), uses_y_(uses_y) {
  register_state(sum_key, &sum_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  SampleMean::reset();
}

void SampleMean::reset() {
  sum_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_examples_ = 0;
}

void SampleMean::update(const Value& output) {
  at::Tensor y_pred, y;
  if (uses_y_) {
    std::tie(y_pred, y) = y_pred_and_y(output);
    KINDLING_CHECK(y_pred.dim() >= 1 && y.dim() >= 1, "kindling::metrics::", name(),
                   ": y_pred and y must have a batch dimension, (N, ...), but given ", y_pred.sizes(), " and ",
                   y.sizes());
    KINDLING_CHECK(y_pred.size(0) == y.size(0), "kindling::metrics::", name(),
                   ": y_pred and y must hold the same number of samples, but given ", y_pred.sizes(), " and ",
                   y.sizes());
    y = y.detach();
  } else {
    y_pred = output.is_tensor() ? output.tensor() : y_pred_and_y(output).first;
  }
  const at::Tensor values = per_sample(y_pred.detach(), y);
  sum_ += values.to(device(), at::kDouble).sum();
  num_examples_ += values.numel();
}

Value SampleMean::compute() {
  const int64_t samples = reduce(num_examples_);
  const double sum = reduce(sum_).item<double>();
  if (samples == 0) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name() +
                             " must have at least one example before it can be computed");
  }
  return Value(sum * scale_ / static_cast<double>(samples));
}

CosineSimilarity::CosineSimilarity(double eps, OutputTransform output_transform, c10::Device device)
    : SampleMean("_sum_of_cos_similarities", std::move(output_transform), device), eps_(eps) {}

at::Tensor CosineSimilarity::per_sample(const at::Tensor& y_pred, const at::Tensor& y) const {
  const at::Tensor p = y_pred.flatten(1).to(at::kDouble), t = y.flatten(1).to(at::kDouble);
  KINDLING_CHECK(p.sizes() == t.sizes(),
                 "kindling::metrics::CosineSimilarity: y_pred and y must have as many "
                 "elements per sample, but given ",
                 y_pred.sizes(), " and ", y.sizes());
  return at::cosine_similarity(p, t, 1, eps_);
}

MeanPairwiseDistance::MeanPairwiseDistance(double p, double eps, OutputTransform output_transform, c10::Device device)
    : SampleMean("_sum_of_distances", std::move(output_transform), device), p_(p), eps_(eps) {}

at::Tensor MeanPairwiseDistance::per_sample(const at::Tensor& y_pred, const at::Tensor& y) const {
  KINDLING_CHECK(y_pred.dim() == 2 && y_pred.sizes() == y.sizes(),
                 "kindling::metrics::MeanPairwiseDistance: "
                 "y_pred and y must have the same shape (N, D), but given ",
                 y_pred.sizes(), " and ", y.sizes());
  return at::pairwise_distance(y_pred.to(at::kDouble), y.to(at::kDouble), p_, eps_);
}

PSNR::PSNR(double data_range, OutputTransform output_transform, c10::Device device)
    : SampleMean("_sum_of_batchwise_psnr", std::move(output_transform), device), data_range_(data_range) {
  KINDLING_CHECK(data_range > 0 && std::isfinite(data_range),
                 "kindling::metrics::PSNR: data_range must be a positive number (1 for values in [0, 1], 255 for "
                 "bytes), got ",
                 data_range);
}

at::Tensor PSNR::per_sample(const at::Tensor& y_pred, const at::Tensor& y) const {
  KINDLING_CHECK(y_pred.scalar_type() == y.scalar_type(),
                 "kindling::metrics::PSNR: y_pred and y must have the "
                 "same dtype, but given ",
                 y_pred.scalar_type(), " and ", y.scalar_type());
  KINDLING_CHECK(y_pred.sizes() == y.sizes(),
                 "kindling::metrics::PSNR: y_pred and y must have the same shape, but "
                 "given ",
                 y_pred.sizes(), " and ", y.sizes());
  KINDLING_CHECK(y.dim() >= 2,
                 "kindling::metrics::PSNR: y_pred and y must have shape (N, ...), a sample of one "
                 "or more values per row (e.g. (N, C, H, W) images), but given ",
                 y.sizes());
  std::vector<int64_t> dims;
  for (int64_t d = 1; d < y.dim(); ++d) dims.push_back(d);
  const at::Tensor mse = (y_pred.to(at::kDouble) - y.to(at::kDouble)).pow(2).mean(dims);
  return 10.0 * at::log10(data_range_ * data_range_ / (mse + 1e-10));
}

}  // namespace metrics
}  // namespace kindling
