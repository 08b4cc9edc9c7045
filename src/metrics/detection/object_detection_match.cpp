// COCO's matching of one image's detections to its ground truth, and one class's interpolated
// average precision and recall, as ignite 0.5.5's ObjectDetectionAvgPrecisionRecall computes
// them (its IoU in the boxes' dtype, thresholds compared in float64).
#include "metrics/detection/object_detection_match.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

namespace kindling {
namespace metrics {
namespace detection {
namespace {

constexpr double kNoMatch = -3;  // below every IoU: no match possible
constexpr double kIgnored = -2;  // added to the IoU with a ground truth box that counts for nothing

at::Tensor box_area(const at::Tensor& boxes) {
  return (boxes.select(1, 2) - boxes.select(1, 0)) * (boxes.select(1, 3) - boxes.select(1, 1));
}

// IoU (N, M) of detections with ground truth; against a crowd box, the share of the detection
// inside it (the union is the detection's area). NaN (empty boxes) as 0.
at::Tensor box_iou(const at::Tensor& pred, const at::Tensor& gt, const at::Tensor& crowd) {
  const at::Tensor area_pred = box_area(pred), area_gt = box_area(gt);
  const at::Tensor lt = at::max(pred.slice(1, 0, 2).unsqueeze(1), gt.slice(1, 0, 2));
  const at::Tensor rb = at::min(pred.slice(1, 2, 4).unsqueeze(1), gt.slice(1, 2, 4));
  const at::Tensor wh = (rb - lt).clamp_min(0);
  const at::Tensor inter = wh.select(2, 0) * wh.select(2, 1);
  at::Tensor uni = area_pred.unsqueeze(1) + area_gt - inter;
  uni.index_put_({at::indexing::Slice(), crowd}, area_pred.unsqueeze(1).expand({-1, crowd.sum().item<int64_t>()}));
  at::Tensor iou = inter / uni;
  return iou.masked_fill_(iou.isnan(), 0);
}

// The greedy matching of one image at each threshold, in the IoU's own type (ignite's tensor
// arithmetic is in that type): returns the best value left per (detection, threshold), >= 0 for
// a true positive and <= kNoMatch for a false one.
template <typename S>
std::vector<S> greedy_match(const at::Tensor& iou, const std::vector<int64_t>& pred_labels,
                            const std::vector<int64_t>& gt_labels, const std::vector<bool>& ignore,
                            const std::vector<bool>& crowd, const std::vector<double>& thresholds) {
  const int64_t D = iou.size(0), M = iou.size(1), T = static_cast<int64_t>(thresholds.size());
  const at::Tensor values = iou.contiguous();
  const S* v = values.data_ptr<S>();
  std::vector<S> w(static_cast<std::size_t>(D * M * T));
  auto w_at = [&](int64_t d, int64_t j, int64_t t) -> S& { return w[static_cast<std::size_t>((d * M + j) * T + t)]; };
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t j = 0; j < M; ++j) {
      for (int64_t t = 0; t < T; ++t) {
        const S x = v[d * M + j];
        S& cell = w_at(d, j, t);
        cell = (pred_labels[d] != gt_labels[j] || static_cast<double>(x) < thresholds[t]) ? S(kNoMatch) : x;
        if (ignore[j]) cell = cell + S(kIgnored);
      }
    }
  }
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t t = 0; t < T; ++t) {
      int64_t best = M - 1;  // ties go to the last box, as ignite's flipped max
      for (int64_t j = M - 2; j >= 0; --j) {
        if (w_at(d, j, t) > w_at(d, best, t)) best = j;
      }
      const S value = w_at(d, best, t);
      if (value > S(kNoMatch) && !crowd[best]) {
        for (int64_t other = 0; other < D; ++other) w_at(other, best, t) = S(kNoMatch);
        w_at(d, best, t) = value;
      }
    }
  }
  std::vector<S> best_left(static_cast<std::size_t>(D * T));
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t t = 0; t < T; ++t) {
      S m = w_at(d, 0, t);
      for (int64_t j = 1; j < M; ++j) m = std::max(m, w_at(d, j, t));
      best_left[static_cast<std::size_t>(d * T + t)] = m;
    }
  }
  return best_left;
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

std::vector<bool> to_bools(const at::Tensor& t) {
  std::vector<bool> out;
  for (int64_t x : to_vector(t)) out.push_back(x != 0);
  return out;
}

// The detections kept: the most confident first (stable), at most `max_detections` per class,
// class 0's first, then class 1's, ...
at::Tensor kept_detections(const at::Tensor& pred, int64_t num_classes, int64_t max_detections) {
  const at::Tensor order = std::get<1>(pred.select(1, 4).sort(/*stable=*/true, 0, /*descending=*/true));
  const std::vector<int64_t> labels = to_vector(pred.select(1, 5).index({order}));
  const std::vector<int64_t> index = to_vector(order);
  std::vector<std::vector<int64_t>> by_class(static_cast<std::size_t>(num_classes));
  for (std::size_t i = 0; i < index.size(); ++i) {
    auto& mine = by_class[static_cast<std::size_t>(labels[i])];
    if (static_cast<int64_t>(mine.size()) < max_detections) mine.push_back(index[i]);
  }
  std::vector<int64_t> kept;
  for (const auto& mine : by_class) kept.insert(kept.end(), mine.begin(), mine.end());
  return at::tensor(kept, at::kLong);
}

}  // namespace

at::Tensor in_area(const at::Tensor& boxes, AreaRange range) {
  const at::Tensor area = box_area(boxes);
  double low = 0, high = 1e10;
  if (range == AreaRange::kSmall) high = 1024;
  if (range == AreaRange::kMedium) low = 1024, high = 9216;
  if (range == AreaRange::kLarge) low = 9216;
  return at::logical_and(area >= low, area <= high);
}

at::Tensor match_image(const at::Tensor& pred, const at::Tensor& gt, const MatchOptions& o, at::Tensor& true_count) {
  const int64_t T = o.iou_thresholds.size(0);
  const at::Tensor gt_boxes = gt.slice(1, 0, 4);
  const at::Tensor gt_labels = gt.select(1, 4).to(at::kLong);
  const at::Tensor crowd = gt.size(1) == 6 ? gt.select(1, 5).ne(0) : at::zeros({gt.size(0)}, at::kBool);
  const at::Tensor ignore = at::logical_not(in_area(gt_boxes, o.area_range)).logical_or(crowd);
  true_count += at::bincount(gt_labels.index({ignore.logical_not()}), {}, o.num_classes).to(true_count.scalar_type());
  if (pred.size(0) == 0) return at::zeros({0, 2 + 2 * T}, at::kDouble);

  const at::Tensor kept = pred.index({kept_detections(pred, o.num_classes, o.max_detections)});
  const at::Tensor boxes = kept.slice(1, 0, 4);
  const at::Tensor pred_in_area = in_area(boxes, o.area_range).to(at::kDouble).unsqueeze(1);
  at::Tensor tp, fp;
  if (gt.size(0) == 0) {
    tp = at::zeros({kept.size(0), T}, at::kDouble);
    fp = pred_in_area.expand({-1, T});
  } else {
    at::ScalarType type = at::promote_types(boxes.scalar_type(), gt_boxes.scalar_type());
    if (!at::isFloatingType(type)) type = at::kFloat;
    const at::Tensor iou = box_iou(boxes.to(type), gt_boxes.to(type), crowd);
    const at::Tensor thresholds = o.iou_thresholds.contiguous();
    const std::vector<double> thr(thresholds.data_ptr<double>(), thresholds.data_ptr<double>() + T);
    at::Tensor best;
    AT_DISPATCH_FLOATING_TYPES(iou.scalar_type(), "match_image", [&] {
      std::vector<scalar_t> left = greedy_match<scalar_t>(iou, to_vector(kept.select(1, 5)), to_vector(gt_labels),
                                                          to_bools(ignore), to_bools(crowd), thr);
      best = at::tensor(std::vector<double>(left.begin(), left.end()), at::kDouble).reshape({kept.size(0), T});
    });
    tp = best.ge(0).to(at::kDouble);
    fp = best.le(kNoMatch).to(at::kDouble) * pred_in_area;
  }
  return at::cat(
      {kept.select(1, 4).to(at::kDouble).unsqueeze(1), kept.select(1, 5).to(at::kDouble).unsqueeze(1), tp, fp}, 1);
}

at::Tensor class_precision_recall(const at::Tensor& rows, double count, const at::Tensor& rec_thresholds,
                                  int64_t thresholds) {
  const at::Tensor order = std::get<1>(rows.select(1, 0).sort(/*stable=*/true, 0, /*descending=*/true));
  const at::Tensor sorted = rows.index({order});
  const at::Tensor tp = sorted.slice(1, 2, 2 + thresholds).t().cumsum(1);  // (T, K)
  const at::Tensor fp = sorted.slice(1, 2 + thresholds, 2 + 2 * thresholds).t().cumsum(1);
  const at::Tensor recall = tp / count;
  const at::Tensor predicted = tp + fp;
  const at::Tensor precision = tp / at::where(predicted == 0, at::ones_like(predicted), predicted);
  // The precision at recall r is the best one at recall >= r (pycocotools' envelope), read
  // where recall first reaches each threshold, 0 past the last recall reached.
  const at::Tensor envelope = std::get<0>(precision.flip(-1).cummax(-1)).flip(-1);
  const int64_t K = recall.size(1);
  const at::Tensor first_reach = at::searchsorted(recall.contiguous(), rec_thresholds.repeat({thresholds, 1}));
  const at::Tensor inside = first_reach != K;
  const at::Tensor read = envelope.take_along_dim(at::where(inside, first_reach, at::zeros_like(first_reach)), -1);
  const at::Tensor ap = at::where(inside, read, at::zeros_like(read)).sum(-1) / rec_thresholds.size(0);
  return at::stack({ap, recall.select(1, K - 1)});
}

}  // namespace detection
}  // namespace metrics
}  // namespace kindling
