#pragma once
/// \file
/// ConfusionMatrix (ignite's) and the metrics derived from it: IoU (JaccardIndex), mIoU,
/// DiceCoefficient, cm_accuracy, cm_precision, cm_recall.
///
/// \code
///   auto cm = std::make_shared<ConfusionMatrix>(21);     // y_pred (N, 21, H, W), y (N, H, W)
///   mIoU(cm, /*ignore_index=*/0)->attach(evaluator, "mIoU");
/// \endcode
///
/// The matrix has rows for targets and columns for predictions (argmax of y_pred over
/// dimension 1). Targets outside [0, C) (e.g. 255 "ignore" labels) are dropped, with their
/// predictions. Ranks: update() is local; compute() sums the matrix over ranks (a collective
/// on every rank), and so do the derived metrics.

#include <memory>
#include <optional>
#include <string>

#include "kindling/metrics/metric.h"
#include "kindling/metrics/metrics_lambda.h"

namespace kindling {
namespace metrics {

class KINDLING_API ConfusionMatrix : public Metric {
 public:
  /// `average`: std::nullopt (counts, int64), "samples" (divided by the number of samples,
  /// i.e. of y_pred.size(0) over the updates), "recall" (each row divided by its sum) or
  /// "precision" (each column divided by its sum); normalized matrices are float32.
  /// Throws kindling::UsageError for another average or num_classes < 2.
  explicit ConfusionMatrix(int64_t num_classes, std::optional<std::string> average = std::nullopt,
                           OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError unless y_pred is (N, C, ...) with C = num_classes and y is
  /// (N, ...) of integer class indices.
  void update(const Value& output) override;
  /// The (C, C) matrix over all ranks (a collective), normalized as `average` says; the
  /// local state is unchanged. Throws NotComputableError when no rank saw a sample.
  Value compute() override;
  std::string name() const override { return "ConfusionMatrix"; }

  int64_t num_classes() const { return num_classes_; }
  const std::optional<std::string>& average() const { return average_; }
  /// This rank's int64 counts since reset() (not reduced).
  const at::Tensor& confusion_matrix() const { return matrix_; }

 private:
  int64_t num_classes_;
  std::optional<std::string> average_;
  at::Tensor matrix_;
  int64_t num_examples_ = 0;
};

/// Intersection over union per class, diag / (row sum + column sum - diag + 1e-15), a
/// float64 (C,) tensor, or (C - 1,) without class `ignore_index`. Throws
/// kindling::UsageError for a null cm, a cm whose average is not std::nullopt or "samples",
/// or ignore_index outside [0, C).
KINDLING_API std::shared_ptr<MetricsLambda> IoU(std::shared_ptr<ConfusionMatrix> cm,
                                                std::optional<int64_t> ignore_index = std::nullopt);
/// The same as IoU.
KINDLING_API std::shared_ptr<MetricsLambda> JaccardIndex(std::shared_ptr<ConfusionMatrix> cm,
                                                         std::optional<int64_t> ignore_index = std::nullopt);
/// The mean of IoU (a number; classes absent from targets and predictions count as 0).
/// Throws as IoU.
KINDLING_API std::shared_ptr<MetricsLambda> mIoU(std::shared_ptr<ConfusionMatrix> cm,
                                                 std::optional<int64_t> ignore_index = std::nullopt);
/// 2 diag / (row sum + column sum + 1e-15) per class, as IoU without its average check.
KINDLING_API std::shared_ptr<MetricsLambda> DiceCoefficient(std::shared_ptr<ConfusionMatrix> cm,
                                                            std::optional<int64_t> ignore_index = std::nullopt);
/// trace / (sum + 1e-15), a number. Throws kindling::UsageError for a null cm.
KINDLING_API std::shared_ptr<MetricsLambda> cm_accuracy(std::shared_ptr<ConfusionMatrix> cm);
/// diag / (column sum + 1e-15) per class; its mean (a number) when `average`. Throws
/// kindling::UsageError for a null cm.
KINDLING_API std::shared_ptr<MetricsLambda> cm_precision(std::shared_ptr<ConfusionMatrix> cm, bool average = true);
/// diag / (row sum + 1e-15) per class; its mean (a number) when `average`. Throws
/// kindling::UsageError for a null cm.
KINDLING_API std::shared_ptr<MetricsLambda> cm_recall(std::shared_ptr<ConfusionMatrix> cm, bool average = true);

}  // namespace metrics
}  // namespace kindling
