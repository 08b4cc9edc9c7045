#pragma once
/// \file
/// Loss (ignite's): the average of loss_fn over all ranks' samples, weighting each batch's
/// mean loss by its size.

#include <functional>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API Loss : public Metric {
 public:
  /// (y_pred, y) -> the batch's mean loss as a 0-dim tensor.
  using LossFunction = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
  /// The number of samples of a batch from y (default y.size(0)).
  using BatchSize = std::function<int64_t(const at::Tensor&)>;

  /// Throws kindling::UsageError for an empty loss_fn.
  explicit Loss(LossFunction loss_fn, OutputTransform output_transform = {}, BatchSize batch_size = {},
                c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Local. Throws kindling::UsageError when loss_fn does not return a 0-dim tensor, or when it
  /// raises a LibTorch error (e.g. y_pred and y of different batch sizes: the message names
  /// Loss, both shapes and LibTorch's reason, without its stack trace; out-of-memory errors
  /// pass as they are); stores nothing then.
  void update(const Value& output) override;
  /// sum(mean loss x batch size) / samples over all ranks (a collective). Throws
  /// NotComputableError when no rank saw a sample.
  Value compute() override;
  std::string name() const override { return "Loss"; }

 private:
  LossFunction loss_fn_;
  BatchSize batch_size_;
  at::Tensor sum_;
  int64_t num_examples_ = 0;
};

}  // namespace metrics
}  // namespace kindling
