// Loss: batch-size-weighted sum of mean losses and the sample count, summed over ranks.
#include "kindling/metrics/loss.h"

#include <ATen/ATen.h>

#include "metrics/libtorch_errors.h"
#include "metrics/shape_text.h"

namespace kindling {
namespace metrics {

Loss::Loss(LossFunction loss_fn, OutputTransform output_transform, BatchSize batch_size, c10::Device device)
    : Metric(std::move(output_transform), device), loss_fn_(std::move(loss_fn)), batch_size_(std::move(batch_size)) {
  KINDLING_CHECK(static_cast<bool>(loss_fn_), "kindling::metrics::Loss: loss_fn is empty");
  register_state("_sum", &sum_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  reset();
}

void Loss::reset() {
  sum_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_examples_ = 0;
}

void Loss::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  const at::Tensor average = naming_libtorch_errors(
      name(), [&] { return loss_fn_(y_pred, y).detach(); },
      [&] { return "loss_fn failed on y_pred of shape " + shape_text(y_pred) + " and y of shape " + shape_text(y); },
      "check that the two fit the loss function (the same batch size, the class dimension)");
  KINDLING_CHECK(average.dim() == 0,
                 "kindling::metrics::Loss: loss_fn did not return the average loss (a 0-dim "
                 "tensor), it returned a tensor of shape ",
                 average.sizes(), "; use a mean reduction");
  const int64_t n = batch_size_ ? batch_size_(y) : y.size(0);
  sum_ += average.to(sum_.options()) * static_cast<double>(n);
  num_examples_ += n;
}

Value Loss::compute() {
  const at::Tensor sum = reduce(sum_);
  const int64_t examples = reduce(num_examples_);
  if (examples == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::Loss must have at least one example before it can be computed");
  }
  return sum.item<double>() / static_cast<double>(examples);
}

}  // namespace metrics
}  // namespace kindling
