#pragma once
/// \file
/// MeanAveragePrecision (ignite's, for classification): the average precision of each class
/// from the scores over every rank's samples, exact (every distinct score a threshold, ties as
/// scikit-learn) or interpolated at given recall thresholds (COCO's 101 points, say), then
/// averaged over the classes (macro, weighted by positives, micro over all, or one per class).
/// Input: y_pred scores (floating point) and y: binary (N,) with (N,) of 0/1, multiclass (N, C)
/// with (N,) labels, multilabel (N, C) with (N, C) of 0/1 (is_multilabel).
///
/// \code
///   auto map = std::make_shared<kindling::metrics::MeanAveragePrecision>();   // macro over classes
///   map->attach(evaluator, "mAP");
/// \endcode
///
/// Ranks: as EpochMetric (epoch_metric.h): update() stores this rank's samples; compute()
/// gathers every rank's (ranks may hold different numbers, or none), computes on rank 0 in
/// float64 and broadcasts the value, a collective on every rank.

#include <optional>
#include <string>
#include <vector>

#include "kindling/metrics/epoch_metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API MeanAveragePrecision : public EpochMetric {
 public:
  /// ignite's class_mean: None (one value per class), "micro", "macro", "weighted".
  enum class ClassMean { kNone, kMicro, kMacro, kWeighted };
  /// `rec_thresholds`: recall values in [0, 1] at which precision is read (sorted here); unset:
  /// the exact average precision. Throws kindling::UsageError for thresholds outside [0, 1].
  explicit MeanAveragePrecision(std::optional<std::vector<double>> rec_thresholds = std::nullopt,
                                ClassMean class_mean = ClassMean::kMacro, bool is_multilabel = false,
                                OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// A number (binary input, or any class mean), or a float64 tensor of one value per class
  /// (ClassMean::kNone). A collective. Throws NotComputableError when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "MeanAveragePrecision"; }

 protected:
  /// Throws kindling::UsageError naming what was given for integer scores, targets that are
  /// not 0/1 (binary, multilabel), labels out of range (multiclass), or shapes that fit none of
  /// the three kinds.
  void check_input(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  bool is_multilabel_;
};

}  // namespace metrics
}  // namespace kindling
