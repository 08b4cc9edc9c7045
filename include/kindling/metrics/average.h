#pragma once
/// \file
/// Accumulations of the engine's outputs over all ranks (ignite's accumulation module):
/// VariableAccumulation (any operation), Average (the arithmetic mean) and GeometricAverage.
/// A number or a 0/1-dim tensor counts as one sample; a tensor of 2 or more dimensions
/// counts as size(0) samples, aggregated along dimension 0 (as ignite). In float64.
///
/// \code
///   auto mean_loss = std::make_shared<kindling::metrics::Average>(
///       [](const kindling::engine::Value& out) { return kindling::engine::Value(out.tuple_elements()[0]); });
///   mean_loss->attach(trainer, "mean_loss");
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order); a rank that saw nothing takes part. Checkpointed and resharded to another world
/// size (Reshard::kSum; VariableAccumulation with another reduction refuses another size).

#include <functional>
#include <string>
#include <utility>

#include "kindling/dist/reduce_op.h"
#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// A float64 accumulator updated by an operation on each output, and the sample count.
class KINDLING_API VariableAccumulation : public Metric {
 public:
  /// The new accumulator from the accumulator (a 0-dim 0 after reset) and one output (float64,
  /// on the metric's device).
  using Op = std::function<at::Tensor(const at::Tensor& accumulator, const at::Tensor& output)>;
  /// `op` accumulates; `across_ranks` combines the ranks' accumulators at compute (ignite
  /// sums them whatever the op: kSum; kMax for an op that keeps a maximum, ...). Throws
  /// kindling::UsageError when `op` is empty.
  explicit VariableAccumulation(Op op, OutputTransform output_transform = {},
                                c10::Device device = c10::Device(c10::kCPU),
                                dist::ReduceOp across_ranks = dist::ReduceOp::kSum);
  void reset() override;
  /// Local. Throws kindling::UsageError for an output that is not a number or a tensor, and
  /// for one that `op` cannot combine with the accumulator (naming the metric, both shapes
  /// and LibTorch's reason: e.g. 1-D outputs of different lengths to Average or
  /// GeometricAverage, where ignite raises LibTorch's own error; out-of-memory errors pass as
  /// they are); stores nothing then.
  void update(const Value& output) override;
  /// (accumulator, num_examples) over all ranks as a tuple of two tensors (a collective).
  /// Throws kindling::UsageError when ranks' accumulators differ in shape (naming both).
  Value compute() override;
  std::string name() const override { return "VariableAccumulation"; }

 protected:
  /// `keys`: the state-dict names of the accumulator and of the count.
  VariableAccumulation(Op op, std::pair<std::string, std::string> keys, OutputTransform output_transform,
                       c10::Device device, dist::ReduceOp across_ranks);
  /// The accumulator and the sample count over every rank (a collective; reduce_to_shape: a
  /// rank that saw nothing adds the reduction's identity in the others' shape). Throws
  /// NotComputableError when no rank saw a sample (if `need_samples`), kindling::UsageError
  /// when ranks' accumulators differ in shape.
  std::pair<at::Tensor, int64_t> reduced(bool need_samples) const;

 private:
  Op op_;
  dist::ReduceOp across_ranks_;
  at::Tensor accumulator_;
  int64_t num_examples_ = 0;
};

/// The arithmetic mean: outputs of 2 or more dimensions are summed along dimension 0.
class KINDLING_API Average : public VariableAccumulation {
 public:
  explicit Average(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// The mean (a number, or a float64 tensor for vector outputs), over all ranks (a
  /// collective). Throws NotComputableError when no rank saw a sample.
  Value compute() override;
  std::string name() const override { return "Average"; }
};

/// The geometric mean exp(mean(log x)) of positive outputs (a log of 0 or of a negative value
/// gives -inf or nan, as ignite).
class KINDLING_API GeometricAverage : public VariableAccumulation {
 public:
  explicit GeometricAverage(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// The geometric mean (a number for a one-element result, else a float64 tensor), over all
  /// ranks (a collective). Throws NotComputableError when no rank saw a sample.
  Value compute() override;
  std::string name() const override { return "GeometricAverage"; }
};

}  // namespace metrics
}  // namespace kindling
