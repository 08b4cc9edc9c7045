// ObjectDetectionAvgPrecisionRecall, CommonObjectDetectionMetrics and coco_tensor_list_to_batch
// (kindling/metrics/object_detection.h): the input checks, the state across ranks and the means;
// the matching and the per-class arithmetic are in object_detection_match.cpp.
#include "kindling/metrics/object_detection.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <utility>

#include "metrics/detection/object_detection_match.h"

namespace kindling {
namespace metrics {
namespace {

const char* const kWho = "kindling::metrics::ObjectDetectionAvgPrecisionRecall";

// Sorted float64 thresholds holding float32 values (ignite makes them with torch.tensor of a
// list, or torch.linspace, in the default float32); `fallback` when none are given.
at::Tensor thresholds_of(const std::optional<std::vector<double>>& given, at::Tensor fallback, const char* what) {
  if (!given) return fallback.to(at::kDouble);
  KINDLING_CHECK(!given->empty(), kWho, ": ", what, " must not be empty");
  for (double t : *given) KINDLING_CHECK(t >= 0 && t <= 1, kWho, ": ", what, " must lie in [0, 1], got ", t);
  return std::get<0>(at::tensor(*given, at::kFloat).sort()).to(at::kDouble);
}

// An image batch as (B, rows, columns): a 2-D tensor is one image.
at::Tensor as_batch(const at::Tensor& t) { return t.dim() == 2 ? t.unsqueeze(0) : t; }

// The rows of one image that are not padding, after checking that their labels are whole
// numbers below `classes`.
at::Tensor real_rows(const at::Tensor& rows, int64_t label_column, int64_t classes, const char* what) {
  const at::Tensor labels = rows.select(1, label_column);
  const at::Tensor real = rows.index({labels >= 0});
  const at::Tensor kept = real.select(1, label_column);
  if (kept.numel() == 0) return real;
  KINDLING_CHECK(at::equal(kept, kept.round()), kWho, ": the labels of ", what, " (column ", label_column,
                 ") must be whole numbers, got ", kept.index({kept != kept.round()})[0].item<double>());
  const double high = kept.max().item<double>();
  KINDLING_CHECK(high < static_cast<double>(classes), kWho, ": a label of ", what, " is ", high,
                 ", outside [0, num_classes = ", classes, "); negative labels mark padding rows");
  return real;
}

}  // namespace

ObjectDetectionAvgPrecisionRecall::ObjectDetectionAvgPrecisionRecall(
    std::optional<std::vector<double>> iou_thresholds, std::optional<std::vector<double>> rec_thresholds,
    int64_t num_classes, int64_t max_detections_per_image_per_class, AreaRange area_range,
    OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device),
      iou_thresholds_(thresholds_of(iou_thresholds, at::linspace(0.5, 0.95, 10, at::kFloat), "iou_thresholds")),
      rec_thresholds_(thresholds_of(rec_thresholds, at::linspace(0, 1, 101, at::kFloat), "rec_thresholds")),
      num_classes_(num_classes),
      max_detections_(max_detections_per_image_per_class),
      area_range_(area_range) {
  KINDLING_CHECK(num_classes >= 1, kWho, ": num_classes must be at least 1, got ", num_classes);
  KINDLING_CHECK(max_detections_per_image_per_class >= 1, kWho,
                 ": max_detections_per_image_per_class must be at least 1, got ", max_detections_per_image_per_class);
  register_state("_detections", &detections_, Reshard::kConcatenate);
  register_state("_y_true_count", &true_count_, Reshard::kSum);
  reset();
}

void ObjectDetectionAvgPrecisionRecall::reset() {
  detections_.clear();
  true_count_ = at::zeros({num_classes_}, at::TensorOptions().dtype(at::kDouble).device(device()));
}

void ObjectDetectionAvgPrecisionRecall::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  y_pred = as_batch(y_pred.detach()).cpu();
  y = as_batch(y.detach()).cpu();
  KINDLING_CHECK(y_pred.dim() == 3 && y_pred.size(2) == 6, kWho,
                 ": y_pred must be (B, N, 6) or (N, 6) rows (x1, y1, x2, y2, score, label), got ", y_pred.sizes());
  KINDLING_CHECK(y.dim() == 3 && (y.size(2) == 5 || y.size(2) == 6), kWho,
                 ": y must be (B, M, 5 or 6) or (M, 5 or 6) rows (x1, y1, x2, y2, label[, iscrowd]), got ", y.sizes());
  KINDLING_CHECK(at::isFloatingType(y_pred.scalar_type()), kWho,
                 ": y_pred must be floating point (it holds scores), got ", y_pred.scalar_type());
  KINDLING_CHECK(y_pred.size(0) == y.size(0) && y.size(0) > 0, kWho,
                 ": y_pred and y must hold the same number of images, at least one, got ", y_pred.size(0), " and ",
                 y.size(0));
  const detection::MatchOptions options{iou_thresholds_, num_classes_, max_detections_, area_range_};
  at::Tensor count = at::zeros({num_classes_}, at::kDouble);
  std::vector<at::Tensor> images;
  for (int64_t b = 0; b < y.size(0); ++b) {
    const at::Tensor pred = real_rows(y_pred[b], 5, num_classes_, "y_pred");
    const at::Tensor gt = real_rows(y[b], 4, num_classes_, "y");
    images.push_back(detection::match_image(pred, gt, options, count));
  }
  true_count_ += count.to(device());  // after every check passed: a refused batch changes nothing
  for (const at::Tensor& rows : images) {
    if (rows.size(0) > 0) detections_.push_back(rows.to(device()));
  }
}

at::Tensor ObjectDetectionAvgPrecisionRecall::per_class() {
  const int64_t T = iou_thresholds_.size(0);
  std::vector<at::Tensor> local;
  if (!detections_.empty()) local.push_back(at::cat(detections_, 0).cpu());
  std::vector<at::Tensor> all = local;
  if (dist::get_world_size() > 1) {  // an object all-gather: ranks hold different numbers of rows
    all.clear();
    for (const auto& shard : dist::all_gather_object(local)) all.insert(all.end(), shard.begin(), shard.end());
  }
  const at::Tensor rows = all.empty() ? at::zeros({0, 2 + 2 * T}, at::kDouble) : at::cat(all, 0);
  const at::Tensor count = reduce(true_count_).cpu();
  at::Tensor table = at::full({2, num_classes_, T}, -1.0, at::kDouble);
  const at::Tensor labels = rows.select(1, 1);
  for (int64_t c = 0; c < num_classes_; ++c) {
    const double n = count[c].item<double>();
    if (n == 0) continue;
    const at::Tensor mine = rows.index({labels == static_cast<double>(c)});
    table.select(1, c).copy_(mine.size(0) == 0 ? at::zeros({2, T}, at::kDouble)
                                               : detection::class_precision_recall(mine, n, rec_thresholds_, T));
  }
  return table;
}

Value ObjectDetectionAvgPrecisionRecall::compute() {
  const at::Tensor table = per_class();
  if (table.eq(-1).all().item<bool>())
    return Value::tuple({at::scalar_tensor(-1.0, at::kDouble), at::scalar_tensor(-1.0, at::kDouble)});
  const at::Tensor ap = table[0], ar = table[1];
  return Value::tuple({ap.index({ap > -1}).mean(), ar.index({ar > -1}).mean()});
}

CommonObjectDetectionMetrics::CommonObjectDetectionMetrics(int64_t num_classes, OutputTransform output_transform,
                                                           c10::Device device)
    : Metric(std::move(output_transform), device) {
  KINDLING_CHECK(num_classes >= 1,
                 "kindling::metrics::CommonObjectDetectionMetrics: num_classes must be at least 1, got ", num_classes);
  using Area = ObjectDetectionAvgPrecisionRecall::AreaRange;
  const std::pair<Area, int64_t> kinds[] = {{Area::kAll, 100},   {Area::kSmall, 100}, {Area::kMedium, 100},
                                            {Area::kLarge, 100}, {Area::kAll, 1},     {Area::kAll, 10}};
  const char* const prefixes[] = {"ap_50_95/", "S/", "M/", "L/", "1/", "10/"};
  for (std::size_t i = 0; i < 6; ++i) {
    parts_.push_back(std::make_shared<ObjectDetectionAvgPrecisionRecall>(
        std::nullopt, std::nullopt, num_classes, kinds[i].second, kinds[i].first, OutputTransform(), device));
    register_member_state(prefixes[i], *parts_.back());
  }
}

void CommonObjectDetectionMetrics::reset() {
  for (const auto& part : parts_) part->reset();
}

void CommonObjectDetectionMetrics::update(const Value& output) {
  for (const auto& part : parts_) part->update(output);
}

Value CommonObjectDetectionMetrics::compute() {
  const at::Tensor table = parts_[0]->per_class();
  auto mean_of = [](const at::Tensor& t) {
    return t.eq(-1).all().item<bool>() ? at::scalar_tensor(-1.0, at::kDouble) : t.index({t > -1}).mean();
  };
  // ignite decides on AP@50 alone whether all four whole-range figures are -1 (they are together).
  std::map<std::string, at::Tensor> out{{"AP@50..95", mean_of(table[0])},
                                        {"AR-100", mean_of(table[1])},
                                        {"AP@50", mean_of(table[0].select(1, 0))},
                                        {"AP@75", mean_of(table[0].select(1, 5))}};
  const char* const names[][2] = {{"AP-S", "AR-S"}, {"AP-M", "AR-M"}, {"AP-L", "AR-L"}, {"", "AR-1"}, {"", "AR-10"}};
  for (std::size_t i = 1; i < parts_.size(); ++i) {
    const Value ap_ar = parts_[i]->compute();
    if (*names[i - 1][0]) out[names[i - 1][0]] = ap_ar[0];
    out[names[i - 1][1]] = ap_ar[1];
  }
  return Value::named(std::move(out));
}

Value coco_tensor_list_to_batch(const std::vector<at::Tensor>& y_pred, const std::vector<at::Tensor>& y) {
  const char* who = "kindling::metrics::coco_tensor_list_to_batch";
  KINDLING_CHECK(!y_pred.empty() && y_pred.size() == y.size(), who,
                 ": y_pred and y must hold one tensor per image, the same number, at least one; got ", y_pred.size(),
                 " and ", y.size());
  const int64_t columns = y[0].dim() == 2 ? y[0].size(1) : 0;
  int64_t most_pred = 0, most_gt = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    KINDLING_CHECK(y_pred[i].dim() == 2 && y_pred[i].size(1) == 6, who, ": y_pred[", i,
                   "] must be (N, 6) rows (x1, y1, x2, y2, score, label), got ", y_pred[i].sizes());
    KINDLING_CHECK(y[i].dim() == 2 && (columns == 5 || columns == 6) && y[i].size(1) == columns, who, ": y[", i,
                   "] must be (M, 5) or (M, 6) rows (x1, y1, x2, y2, label[, iscrowd]) as y[0], got ", y[i].sizes());
    most_pred = std::max(most_pred, y_pred[i].size(0));
    most_gt = std::max(most_gt, y[i].size(0));
  }
  auto padded = [](const std::vector<at::Tensor>& images, int64_t rows, int64_t label_column) {
    at::Tensor out = at::zeros({static_cast<int64_t>(images.size()), rows, images[0].size(1)}, images[0].options());
    out.select(2, label_column).fill_(-1);
    for (std::size_t i = 0; i < images.size(); ++i) {
      out[static_cast<int64_t>(i)].slice(0, 0, images[i].size(0)).copy_(images[i]);
    }
    return out;
  };
  return Value::tuple({padded(y_pred, most_pred, 5), padded(y, most_gt, 4)});
}

}  // namespace metrics
}  // namespace kindling
