#pragma once
/// \file
/// Average (ignite's): the mean of the engine's outputs (numbers or tensors) over all ranks.
/// A number or a 0/1-dim tensor counts as one sample; a tensor of 2 or more dimensions
/// counts as size(0) samples, averaged along dimension 0 (as ignite).

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API Average : public Metric {
 public:
  explicit Average(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError for an output that is not a number or a tensor.
  void update(const Value& output) override;
  /// The mean (a number, or a float64 tensor for vector outputs), over all ranks (a
  /// collective). Throws NotComputableError when no rank saw a sample.
  Value compute() override;
  std::string name() const override { return "Average"; }

 private:
  at::Tensor accumulator_;
  int64_t num_examples_ = 0;
};

}  // namespace metrics
}  // namespace kindling
