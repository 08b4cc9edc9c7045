// Accuracy: correct and example counts, summed over ranks at compute.
#include "kindling/metrics/accuracy.h"

#include <ATen/ATen.h>

namespace kindling {
namespace metrics {

Accuracy::Accuracy(OutputTransform output_transform, bool is_multilabel, c10::Device device)
    : ClassificationMetric(std::move(output_transform), is_multilabel, device) {
  register_state("_num_correct", &num_correct_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  reset();
}

void Accuracy::reset() {
  reset_type();
  num_correct_ = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device()));
  num_examples_ = 0;
}

void Accuracy::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  y_pred = y_pred.detach();
  y = y.detach();
  check(y_pred, y);
  at::Tensor correct;
  switch (input_type()) {
    case InputType::kBinary: correct = y_pred.reshape(-1).to(y.scalar_type()) == y.reshape(-1); break;
    case InputType::kMulticlass: correct = (at::argmax(y_pred, 1) == y).reshape(-1); break;
    case InputType::kMultilabel: {
      const int64_t c = y_pred.size(1);
      at::Tensor p = at::movedim(y_pred, 1, -1).reshape({-1, c});
      at::Tensor t = at::movedim(y, 1, -1).reshape({-1, c});
      correct = at::all(t == p.to(t.scalar_type()), 1);
      break;
    }
    case InputType::kUnknown: break;
  }
  num_correct_ += correct.sum().to(num_correct_.device());
  num_examples_ += correct.size(0);
}

Value Accuracy::compute() {
  const int64_t examples = reduce(num_examples_);
  const at::Tensor correct = reduce(num_correct_);
  if (examples == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::Accuracy must have at least one example before it can be computed");
  }
  return correct.item<double>() / static_cast<double>(examples);
}

}  // namespace metrics
}  // namespace kindling
