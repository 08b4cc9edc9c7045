// VariableAccumulation, Average and GeometricAverage: a float64 accumulator and a sample count,
// combined over ranks at compute (kindling/metrics/average.h).
#include "kindling/metrics/average.h"

#include <ATen/ATen.h>

#include "metrics/libtorch_errors.h"
#include "metrics/shape_text.h"

namespace kindling {
namespace metrics {

VariableAccumulation::VariableAccumulation(Op op, OutputTransform output_transform, c10::Device device,
                                           dist::ReduceOp across_ranks)
    : VariableAccumulation(std::move(op), {"accumulator", "num_examples"}, std::move(output_transform), device,
                           across_ranks) {}

VariableAccumulation::VariableAccumulation(Op op, std::pair<std::string, std::string> keys,
                                           OutputTransform output_transform, c10::Device device,
                                           dist::ReduceOp across_ranks)
    : Metric(std::move(output_transform), device), op_(std::move(op)), across_ranks_(across_ranks) {
  KINDLING_CHECK(static_cast<bool>(op_),
                 "kindling::metrics::VariableAccumulation: the op must be a callable "
                 "(accumulator, output) -> accumulator, but it is empty");
  const Reshard rule = across_ranks == dist::ReduceOp::kSum ? Reshard::kSum : Reshard::kRefuse;
  register_state(keys.first, &accumulator_, rule);
  register_state(keys.second, &num_examples_, rule);
  VariableAccumulation::reset();
}

void VariableAccumulation::reset() {
  accumulator_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_examples_ = 0;
}

void VariableAccumulation::update(const Value& output) {
  KINDLING_CHECK(output.is_number() || output.is_tensor(), "kindling::metrics::", name(),
                 ": the (transformed) engine output should be a number or a tensor, but it is ", output.to_string(),
                 "; set an output_transform");
  const at::Tensor x = output.tensor().detach().to(accumulator_.options());
  // e.g. 1-D outputs of different lengths
  accumulator_ = naming_libtorch_errors(
      name(), [&] { return op_(accumulator_, x); },
      [&] {
        return "this output, of shape " + shape_text(x) + ", does not combine with the accumulator of the earlier " +
               "ones, of shape " + shape_text(accumulator_);
      },
      "give outputs of one shape, samples along dimension 0");
  num_examples_ += x.dim() > 1 ? x.size(0) : 1;
}

std::pair<at::Tensor, int64_t> VariableAccumulation::reduced(bool need_samples) const {
  const at::Tensor accumulator = reduce_to_shape(accumulator_, num_examples_ > 0, across_ranks_);
  const int64_t examples = reduce(num_examples_);
  if (need_samples && examples == 0) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name() +
                             " must have at least one example before it can be computed");
  }
  return {accumulator, examples};
}

Value VariableAccumulation::compute() {
  const auto [accumulator, examples] = reduced(/*need_samples=*/false);
  return Value::tuple({accumulator, at::full({}, examples, at::kLong)});
}

namespace {
// A number for a 0-dim or one-element tensor (ignite's .item() where it applies), else the tensor.
Value number_or_tensor(const at::Tensor& t, bool one_element_is_number) {
  if (t.dim() == 0 || (one_element_is_number && t.numel() == 1)) return Value(t.item<double>());
  return Value(t);
}
}  // namespace

Average::Average(OutputTransform output_transform, c10::Device device)
    : VariableAccumulation([](const at::Tensor& a, const at::Tensor& x) { return a + (x.dim() > 1 ? x.sum(0) : x); },
                           {"_accumulator", "_num_examples"}, std::move(output_transform), device,
                           dist::ReduceOp::kSum) {}

Value Average::compute() {
  const auto [sum, examples] = reduced(/*need_samples=*/true);
  return number_or_tensor(sum / static_cast<double>(examples), false);
}

GeometricAverage::GeometricAverage(OutputTransform output_transform, c10::Device device)
    : VariableAccumulation(
          [](const at::Tensor& a, const at::Tensor& x) {
            const at::Tensor logs = x.log();
            return a + (logs.dim() > 1 ? logs.sum(0) : logs);
          },
          {"accumulator", "num_examples"}, std::move(output_transform), device, dist::ReduceOp::kSum) {}

Value GeometricAverage::compute() {
  const auto [sum, examples] = reduced(/*need_samples=*/true);
  return number_or_tensor(at::exp(sum / static_cast<double>(examples)), true);
}

}  // namespace metrics
}  // namespace kindling
