#pragma once
/// \file
/// ObjectDetectionAvgPrecisionRecall and CommonObjectDetectionMetrics (ignite's
/// ignite.metrics.vision): an object detector's mean average precision and recall as COCO
/// defines them. Per image, each class's detections (the most confident first, at most
/// max_detections_per_image_per_class of them) are matched greedily to that class's ground
/// truth at each IoU threshold (a crowd box may take many detections; a box outside the area
/// range, or a crowd one, counts neither as found nor as missed), then per class the precision
/// is read at 101 recall points (pycocotools' interpolation) and averaged.
///
/// Input (the tuple {y_pred, y} of one batch of B images; coco_tensor_list_to_batch makes it
/// from one tensor per image, the layout of ignite's coco_tensor_list_to_dict_list):
/// - y_pred (B, N, 6) floating point: each image's detections as rows (x1, y1, x2, y2, score, label);
/// - y (B, M, 5) or (B, M, 6): each image's ground truth as rows (x1, y1, x2, y2, label[, iscrowd]);
/// rows with a negative label are padding (for images with fewer boxes); an (N, 6) and an
/// (M, 5 or 6) tensor are one image. ignite's update takes the same as lists of dicts
/// ("bbox", "scores", "labels" and "bbox", "labels", "iscrowd").
///
/// \code
///   auto ap_ar = std::make_shared<km::ObjectDetectionAvgPrecisionRecall>();  // 80 classes, IoU .50:.95
///   ap_ar->attach(evaluator, "ap_ar");        // state().metrics["ap_ar"]: the tuple (AP, AR)
///   auto coco = std::make_shared<km::CommonObjectDetectionMetrics>(/*num_classes=*/20);
///   coco->attach(evaluator, "coco");          // also "AP@50..95", "AP@50", "AR-100", ... on their own
/// \endcode
///
/// Ranks: update() is local (it matches this rank's images); compute() gathers every rank's
/// matched detections and sums the ground-truth counts, so ranks may hold any share of the
/// images (or none): a collective on every rank.

#include <optional>
#include <string>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API ObjectDetectionAvgPrecisionRecall : public Metric {
 public:
  /// Which ground truth and detections count, by box area (COCO's): all; small (area <= 32^2);
  /// medium (32^2 to 96^2); large (>= 96^2). Bounds inclusive, as ignite's.
  enum class AreaRange { kAll, kSmall, kMedium, kLarge };

  /// `iou_thresholds` (unset: COCO's .50, .55, ..., .95) and `rec_thresholds` (unset: 0, .01,
  /// ..., 1), each in [0, 1] (sorted here; held as float32 values, as ignite's); `num_classes`
  /// labels 0..num_classes-1 (COCO's 80 by default). Throws kindling::UsageError for an empty
  /// threshold list, a threshold outside [0, 1], num_classes or
  /// max_detections_per_image_per_class < 1.
  explicit ObjectDetectionAvgPrecisionRecall(std::optional<std::vector<double>> iou_thresholds = std::nullopt,
                                             std::optional<std::vector<double>> rec_thresholds = std::nullopt,
                                             int64_t num_classes = 80, int64_t max_detections_per_image_per_class = 100,
                                             AreaRange area_range = AreaRange::kAll,
                                             OutputTransform output_transform = {},
                                             c10::Device device = c10::Device(c10::kCPU));

  void reset() override;
  /// Matches each image of the batch (see the file comment for the layout) and keeps its
  /// detections' scores, labels and true / false positives per IoU threshold. Local. Throws
  /// kindling::UsageError naming what it got for other shapes, integer scores, batches of
  /// different image counts or no image, a label that is not a whole number below num_classes.
  void update(const Value& output) override;
  /// The tuple (AP, AR) as two 0-dim float64 tensors: the means over the classes that have
  /// ground truth and the IoU thresholds; (-1, -1) when no class has any. A collective.
  Value compute() override;
  std::string name() const override { return "ObjectDetectionAvgPrecisionRecall"; }

  /// Every class's average precision ([0]) and recall ([1]) at each IoU threshold, over every
  /// rank's images: (2, num_classes, thresholds) float64, -1 for a class without ground truth
  /// (ignite's _compute). A collective.
  at::Tensor per_class();
  /// The IoU thresholds, ascending (float64 holding float32 values).
  const at::Tensor& iou_thresholds() const { return iou_thresholds_; }

 private:
  at::Tensor iou_thresholds_, rec_thresholds_;
  int64_t num_classes_, max_detections_;
  AreaRange area_range_;
  std::vector<at::Tensor> detections_;  // (D, 2 + 2T) float64 per image: score, label, TP per IoU, FP per IoU
  at::Tensor true_count_;               // (num_classes,) ground truth that counts, per class
};

/// ignite's CommonObjectDetectionMetrics: COCO's twelve figures, named as ignite's:
/// "AP@50..95", "AP@50", "AP@75", "AR-100" (every box, at most 100 detections per image and
/// class), "AP-S", "AR-S", "AP-M", "AR-M", "AP-L", "AR-L" (by area) and "AR-1", "AR-10" (at most 1
/// or 10 detections per image and class), each -1 where no class has ground truth. Input and
/// ranks as ObjectDetectionAvgPrecisionRecall (six of them inside, the default IoU and recall
/// thresholds).
class KINDLING_API CommonObjectDetectionMetrics : public Metric {
 public:
  /// Throws kindling::UsageError for num_classes < 1.
  explicit CommonObjectDetectionMetrics(int64_t num_classes = 80, OutputTransform output_transform = {},
                                        c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Updates the six metrics inside. Local; throws as ObjectDetectionAvgPrecisionRecall::update.
  void update(const Value& output) override;
  /// The twelve figures as named 0-dim float64 tensors. A collective.
  Value compute() override;
  std::string name() const override { return "CommonObjectDetectionMetrics"; }

 private:
  std::vector<std::shared_ptr<ObjectDetectionAvgPrecisionRecall>> parts_;  // all, S, M, L, 1, 10
};

/// The input of the two metrics above from one tensor per image, each image's rows padded
/// with rows of label -1 to the batch's largest count (ignite's coco_tensor_list_to_dict_list
/// takes the same per-image tensors): `y_pred` (N_i, 6) rows (x1, y1, x2, y2, score, label),
/// `y` (M_i, 5) rows (x1, y1, x2, y2, label) or (M_i, 6) with iscrowd last. Returns the tuple
/// {(B, max N_i, 6), (B, max M_i, 5 or 6)} in the first tensors' dtypes. Local. Throws
/// kindling::UsageError for lists of different lengths or no image, or a tensor of another
/// shape (naming its index).
KINDLING_API Value coco_tensor_list_to_batch(const std::vector<at::Tensor>& y_pred, const std::vector<at::Tensor>& y);

}  // namespace metrics
}  // namespace kindling
