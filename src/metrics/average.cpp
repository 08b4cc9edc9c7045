// Average: a float64 accumulator and a sample count, summed over ranks at compute.
#include "kindling/metrics/average.h"

#include <ATen/ATen.h>

namespace kindling {
namespace metrics {

Average::Average(OutputTransform output_transform, c10::Device device) : Metric(std::move(output_transform), device) {
  register_state("_accumulator", &accumulator_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  reset();
}

void Average::reset() {
  accumulator_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_examples_ = 0;
}

void Average::update(const Value& output) {
  KINDLING_CHECK(output.is_number() || output.is_tensor(),
                 "kindling::metrics::Average: the (transformed) engine "
                 "output should be a number or a tensor, but it is ",
                 output.to_string(), "; set an output_transform");
  at::Tensor x = output.tensor().detach().to(accumulator_.options());
  if (x.dim() > 1) {
    num_examples_ += x.size(0);
    x = x.sum(0);
  } else {
    num_examples_ += 1;
  }
  accumulator_ = accumulator_ + x;
}

Value Average::compute() {
  const at::Tensor sum = reduce(accumulator_);
  const int64_t examples = reduce(num_examples_);
  if (examples == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::Average must have at least one example before it can be computed");
  }
  at::Tensor mean = sum / static_cast<double>(examples);
  if (mean.dim() == 0) return mean.item<double>();
  return mean;
}

}  // namespace metrics
}  // namespace kindling
