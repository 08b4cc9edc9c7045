#pragma once
/// \file
/// EpochMetric (ignite's): keeps every prediction and target since reset() and applies a
/// function to all of them at compute (for metrics that do not decompose over batches, such
/// as ROC AUC).
///
/// \code
///   auto mean_target = std::make_shared<EpochMetric>(
///       [](const at::Tensor& y_pred, const at::Tensor& y) -> Value { return y.to(at::kDouble).mean(); });
///   mean_target->attach(evaluator, "mean_target");
/// \endcode
///
/// Ranks: update() is local. compute() gathers every rank's predictions and targets (ranks
/// may hold different numbers of samples, or none), runs compute_fn on rank 0 only and
/// broadcasts its result, so every rank returns rank 0's value: a collective on every rank.

#include <functional>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API EpochMetric : public Metric {
 public:
  /// (all predictions, all targets) -> the value (a number, a tensor, a tuple or named
  /// tensors). Called with the batches concatenated along dimension 0.
  using ComputeFunction = std::function<Value(const at::Tensor& y_pred, const at::Tensor& y)>;

  /// With `check_compute_fn`, the first update after each reset() tries compute_fn on that
  /// batch and logs a warning if it throws. Throws kindling::UsageError for an empty compute_fn.
  explicit EpochMetric(ComputeFunction compute_fn, OutputTransform output_transform = {}, bool check_compute_fn = true,
                       c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Stores a copy of y_pred and y on device(). Each must be (batch_size,) or
  /// (batch_size, n_targets); a (batch_size, 1) tensor is stored as (batch_size,). Throws
  /// kindling::UsageError for other shapes, or a dtype or number of columns that differs
  /// from the batches stored before.
  void update(const Value& output) override;
  /// compute_fn over all ranks' samples, in rank order (a collective: every rank). Throws
  /// NotComputableError when no rank stored a sample; rethrows on rank 0 what compute_fn
  /// throws, and throws on the other ranks then an exception of the same kind
  /// (NotComputableError, kindling::UsageError, else kindling::Error) quoting its message.
  Value compute() override;
  std::string name() const override { return "EpochMetric"; }

 protected:
  /// Called by update() on each batch after the (batch_size, 1) squeeze and before storing
  /// it (ignite's _check_shape / _check_type): a subclass throws kindling::UsageError there
  /// to refuse input its compute_fn cannot use, and nothing is stored. Local. The default
  /// accepts everything.
  virtual void check_input(const at::Tensor& y_pred, const at::Tensor& y) const;

 private:
  ComputeFunction compute_fn_;
  bool check_compute_fn_;
  std::vector<at::Tensor> predictions_, targets_;
};

}  // namespace metrics
}  // namespace kindling
