// Perplexity (kindling/metrics/perplexity.h): the summed cross entropy and the token count.
#include "kindling/metrics/perplexity.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

namespace kindling {
namespace metrics {

Perplexity::Perplexity(OutputTransform output_transform, c10::Device device, int64_t ignore_index)
    : Metric(std::move(output_transform), device), ignore_index_(ignore_index) {
  register_state("_sum_of_nll", &sum_of_nll_, Reshard::kSum);
  register_state("_num_tokens", &num_tokens_, Reshard::kSum);
  Perplexity::reset();
}

void Perplexity::reset() {
  sum_of_nll_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_tokens_ = 0;
}

void Perplexity::update(const Value& output) {
  const auto [y_pred, y] = y_pred_and_y(output);
  KINDLING_CHECK(y_pred.dim() >= 2 && y.dim() == y_pred.dim() - 1,
                 "kindling::metrics::Perplexity: y_pred must be "
                 "logits (N, C, ...) with exactly one more dimension than the targets y (N, ...), but given ",
                 y_pred.sizes(), " and ", y.sizes());
  bool matching = y_pred.size(0) == y.size(0);
  for (int64_t d = 2; d < y_pred.dim(); ++d) matching = matching && y_pred.size(d) == y.size(d - 1);
  KINDLING_CHECK(matching,
                 "kindling::metrics::Perplexity: y_pred (N, C, d1, ...) and y (N, d1, ...) do not match, "
                 "given ",
                 y_pred.sizes(), " and ", y.sizes());
  KINDLING_CHECK(at::isFloatingType(y_pred.scalar_type()) && !at::isFloatingType(y.scalar_type()),
                 "kindling::metrics::Perplexity: y_pred must be floating point logits and y integer class indices, "
                 "but given ",
                 y_pred.scalar_type(), " and ", y.scalar_type());
  const at::Tensor targets = y.detach().to(at::kLong);
  const at::Tensor nll =
      at::cross_entropy_loss(y_pred.detach().to(at::kDouble), targets, {}, at::Reduction::Sum, ignore_index_);
  sum_of_nll_ += nll.to(device());
  num_tokens_ += (targets != ignore_index_).sum().item<int64_t>();
}

Value Perplexity::compute() {
  const double nll = reduce(sum_of_nll_).item<double>();
  const int64_t tokens = reduce(num_tokens_);
  if (tokens == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::Perplexity must have at least one example before it can be computed");
  }
  return Value(std::exp(nll / static_cast<double>(tokens)));
}

}  // namespace metrics
}  // namespace kindling
