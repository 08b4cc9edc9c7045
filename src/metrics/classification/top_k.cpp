// TopKCategoricalAccuracy: correct and example counts, summed over ranks at compute.
#include "kindling/metrics/top_k.h"

#include <ATen/ATen.h>

#include <tuple>

namespace kindling {
namespace metrics {

TopKCategoricalAccuracy::TopKCategoricalAccuracy(int64_t k, OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device), k_(k) {
  KINDLING_CHECK(k >= 1, "kindling::metrics::TopKCategoricalAccuracy: k should be at least 1, but given ", k);
  register_state("_num_correct", &num_correct_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  reset();
}

void TopKCategoricalAccuracy::reset() {
  num_correct_ = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device()));
  num_examples_ = 0;
}

void TopKCategoricalAccuracy::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  y_pred = y_pred.detach();
  y = y.detach();
  KINDLING_CHECK(y_pred.dim() == 2,
                 "kindling::metrics::TopKCategoricalAccuracy: y_pred must have shape (batch_size, "
                 "num_classes), but given ",
                 y_pred.sizes());
  KINDLING_CHECK(y.dim() == 1 && y.size(0) == y_pred.size(0),
                 "kindling::metrics::TopKCategoricalAccuracy: y must "
                 "have shape (batch_size,) matching y_pred ",
                 y_pred.sizes(), ", but given ", y.sizes());
  KINDLING_CHECK(y_pred.size(1) >= k_, "kindling::metrics::TopKCategoricalAccuracy: y_pred has ", y_pred.size(1),
                 " classes, fewer than k = ", k_, "; use a smaller k");
  const at::Tensor top = std::get<1>(at::topk(y_pred, k_, 1));
  const at::Tensor correct = (top == y.to(top.device()).to(at::kLong).reshape({-1, 1})).sum(1);
  num_correct_ += correct.sum().to(num_correct_.device());
  num_examples_ += y.size(0);
}

Value TopKCategoricalAccuracy::compute() {
  const at::Tensor correct = reduce(num_correct_);
  const int64_t examples = reduce(num_examples_);
  if (examples == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::TopKCategoricalAccuracy must have at least "
                             "one example before it can be computed");
  }
  return correct.item<double>() / static_cast<double>(examples);
}

}  // namespace metrics
}  // namespace kindling
