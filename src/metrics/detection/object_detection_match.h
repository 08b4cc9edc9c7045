#pragma once
// The arithmetic of ObjectDetectionAvgPrecisionRecall (kindling/metrics/object_detection.h):
// matching one image's detections to its ground truth, and one class's average precision and
// recall. Internal to src/metrics.
#include <ATen/ATen.h>

#include <cstdint>

#include "kindling/metrics/object_detection.h"

namespace kindling {
namespace metrics {
namespace detection {

using AreaRange = ObjectDetectionAvgPrecisionRecall::AreaRange;

/// What one image's matching needs besides its boxes.
struct MatchOptions {
  at::Tensor iou_thresholds;  // (T,) float64, ascending
  int64_t num_classes = 0;
  int64_t max_detections = 0;  // per class
  AreaRange area_range = AreaRange::kAll;
};

/// Whether each box (n, 4) lies in the area range (area compared in the boxes' dtype). Local.
at::Tensor in_area(const at::Tensor& boxes, AreaRange range);

/// One image: `pred` (N, 6) and `gt` (M, 5 or 6) rows without padding, labels whole and in
/// range, on the CPU. Adds the ground truth that counts to `true_count` (num_classes,) and
/// returns the kept detections as rows (D, 2 + 2T) float64: score, label, then 1/0 per IoU
/// threshold for a true positive, then for a false positive (COCO's matching, as ignite's).
at::Tensor match_image(const at::Tensor& pred, const at::Tensor& gt, const MatchOptions& options,
                       at::Tensor& true_count);

/// One class with `count` > 0 ground truth: its rows (K, 2 + 2T) (K >= 1) in the order they
/// were kept; returns (2, T) float64: the average precision at the recall thresholds
/// `rec_thresholds` (R,) and the recall reached, per IoU threshold.
at::Tensor class_precision_recall(const at::Tensor& rows, double count, const at::Tensor& rec_thresholds,
                                  int64_t thresholds);

}  // namespace detection
}  // namespace metrics
}  // namespace kindling
