#pragma once
/// \file
/// MultiLabelConfusionMatrix (ignite's): one 2x2 matrix per label, [[tn, fp], [fn, tp]].
///
/// \code
///   auto mlcm = std::make_shared<kindling::metrics::MultiLabelConfusionMatrix>(5);
///   mlcm->attach(evaluator, "mlcm");   // y_pred and y of 0s and 1s, (N, 5) or (N, 5, ...)
/// \endcode
///
/// Ranks: update() is local; compute() sums the matrices and sample counts over ranks (a
/// collective on every rank). Checkpointed and resharded to another world size by sums.

#include <string>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API MultiLabelConfusionMatrix : public Metric {
 public:
  /// `normalized`: each label's matrix divided by its sum (float64) instead of int64 counts.
  /// Throws kindling::UsageError when num_classes < 2.
  explicit MultiLabelConfusionMatrix(int64_t num_classes, OutputTransform output_transform = {},
                                     c10::Device device = c10::Device(c10::kCPU), bool normalized = false);
  void reset() override;
  /// Throws kindling::UsageError unless y_pred and y have the same shape (N, num_classes, ...),
  /// an integer dtype and values 0 and 1 only; nothing is stored then.
  void update(const Value& output) override;
  /// The (num_classes, 2, 2) matrices over all ranks (a collective): int64 counts, or float64
  /// fractions when normalized. The local state is unchanged. Throws NotComputableError when
  /// no rank saw a sample.
  Value compute() override;
  std::string name() const override { return "MultiLabelConfusionMatrix"; }
  int64_t num_classes() const { return num_classes_; }

 private:
  int64_t num_classes_;
  bool normalized_;
  at::Tensor matrix_;  // (num_classes, 2, 2) int64
  int64_t num_examples_ = 0;
};

}  // namespace metrics
}  // namespace kindling
