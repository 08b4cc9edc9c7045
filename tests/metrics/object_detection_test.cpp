// ObjectDetectionAvgPrecisionRecall and CommonObjectDetectionMetrics
// (kindling/metrics/object_detection.h): equal to the real ignite 0.5.5 on the same images
// (tests/metrics/ignite_cases.py, where the build's Python has it: the LibTorch 2.15 venv) with
// crowd boxes, padding, images without ground truth or detections, every area range, fewer
// detections kept, other thresholds; values worked by hand; coco_tensor_list_to_batch; misuse
// refused with what was given and without changing the state. Across ranks (1, 2 and 3 with an
// empty shard, gloo and mpi): distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/metrics/object_detection.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace object_detection_test {

using kindling::testing::batches_of;
using kindling::testing::IgniteCase;
using Batch = kindling::testing::MetricBatch;
using Detection = km::ObjectDetectionAvgPrecisionRecall;
using Area = Detection::AreaRange;

// `n` images of up to 4 ground truth boxes of 3 classes (sides 4 to 124: every area range; some
// crowd, some padding) and up to 6 detections: jittered copies of the ground truth (some of
// another class) and boxes anywhere, with continuous scores.
Batch images(at::Generator& g, int64_t n, bool crowd_column) {
  const int64_t m = 4, d = 6;
  const at::Tensor corner = at::rand({n, m, 2}, g) * 100, side = 4 + at::rand({n, m, 2}, g) * 120;
  at::Tensor gt = at::cat({corner, corner + side, at::randint(0, 3, {n, m, 1}, g).to(at::kFloat),
                           (at::rand({n, m, 1}, g) < 0.15).to(at::kFloat)},
                          2);
  gt.select(2, 4).masked_fill_(at::rand({n, m}, g) < 0.2, -1);  // padding rows
  at::Tensor pred = at::zeros({n, d, 6});
  const at::Tensor jitter = 1 + (at::rand({n, m, 4}, g) - 0.5) * 0.4;
  pred.slice(1, 0, m).slice(2, 0, 4).copy_(gt.slice(2, 0, 4) * jitter);
  pred.slice(1, 0, m).select(2, 5).copy_(
      at::where(at::rand({n, m}, g) < 0.8, gt.select(2, 4).clamp_min(0), at::randint(0, 3, {n, m}, g).to(at::kFloat)));
  const at::Tensor far = at::rand({n, d - m, 2}, g) * 150;
  pred.slice(1, m, d).slice(2, 0, 4).copy_(at::cat({far, far + 4 + at::rand({n, d - m, 2}, g) * 60}, 2));
  pred.slice(1, m, d).select(2, 5).copy_(at::randint(0, 3, {n, d - m}, g).to(at::kFloat));
  pred.select(2, 4).copy_(at::rand({n, d}, g));
  pred.select(2, 5).masked_fill_(at::rand({n, d}, g) < 0.15, -1);
  if (n > 3) {
    gt[0].select(1, 4).fill_(-1);    // an image without ground truth
    pred[1].select(1, 5).fill_(-1);  // one without detections
  }
  return {pred, crowd_column ? gt : gt.slice(2, 0, 5)};
}

std::vector<IgniteCase> cases() {
  const auto crowds = batches_of(81, [](at::Generator& g, int64_t n) { return images(g, n, true); });
  const auto plain = batches_of(82, [](at::Generator& g, int64_t n) { return images(g, n, false); });
  auto make = [](std::optional<std::vector<double>> iou, std::optional<std::vector<double>> rec, int64_t classes,
                 int64_t most,
                 Area area) { return [=] { return std::make_shared<Detection>(iou, rec, classes, most, area); }; };
  const std::string vision = "vision.ObjectDetectionAvgPrecisionRecall";
  std::vector<IgniteCase> all{
      {"coco", vision, R"({"num_classes": 3})", crowds, make(std::nullopt, std::nullopt, 3, 100, Area::kAll)},
      {"no_crowd_80", vision, "{}", plain, make(std::nullopt, std::nullopt, 80, 100, Area::kAll)},
      {"small", vision, R"({"num_classes": 3, "area_range": "small"})", crowds,
       make(std::nullopt, std::nullopt, 3, 100, Area::kSmall)},
      {"medium", vision, R"({"num_classes": 3, "area_range": "medium"})", crowds,
       make(std::nullopt, std::nullopt, 3, 100, Area::kMedium)},
      {"large", vision, R"({"num_classes": 3, "area_range": "large"})", crowds,
       make(std::nullopt, std::nullopt, 3, 100, Area::kLarge)},
      {"one_each", vision, R"({"num_classes": 3, "max_detections_per_image_per_class": 1})", crowds,
       make(std::nullopt, std::nullopt, 3, 1, Area::kAll)},
      {"thresholds", vision,
       R"({"num_classes": 3, "iou_thresholds": [0.7, 0.3, 0.5], "rec_thresholds": [0.0, 0.25, 0.5, 0.75, 1.0]})",
       crowds,
       make(std::vector<double>{0.7, 0.3, 0.5}, std::vector<double>{0, 0.25, 0.5, 0.75, 1}, 3, 100, Area::kAll)},
      {"common", "CommonObjectDetectionMetrics", R"({"num_classes": 3})", crowds,
       [] { return std::make_shared<km::CommonObjectDetectionMetrics>(3); }},
  };
  for (IgniteCase& k : all) k.inputs = "detection";
  return all;
}

TEST(ObjectDetectionTest, EqualIgnite055OnTheSameImages) { kindling::testing::expect_ignite_values(cases()); }

double first(const Value& v) { return v[0].item<double>(); }
double second(const Value& v) { return v[1].item<double>(); }

TEST(ObjectDetectionTest, ValuesWorkedByHand) {
  // One box of class 0; a perfect detection and a far one of the same class.
  const at::Tensor gt = at::tensor({0.f, 0.f, 10.f, 10.f, 0.f}).reshape({1, 5});
  Detection best_first(std::nullopt, std::nullopt, 2);
  best_first.update(Value::tuple(
      {at::tensor({0.f, 0.f, 10.f, 10.f, .9f, 0.f, 20.f, 20.f, 30.f, 30.f, .8f, 0.f}).reshape({2, 6}), gt}));
  EXPECT_DOUBLE_EQ(first(best_first.compute()), 1.0) << "precision 1 up to recall 1";
  EXPECT_DOUBLE_EQ(second(best_first.compute()), 1.0);
  // The far one more confident: precision 1/2 when recall reaches 1, at every IoU threshold.
  Detection far_first(std::nullopt, std::nullopt, 2);
  far_first.update(Value::tuple(
      {at::tensor({0.f, 0.f, 10.f, 10.f, .8f, 0.f, 20.f, 20.f, 30.f, 30.f, .9f, 0.f}).reshape({2, 6}), gt}));
  EXPECT_DOUBLE_EQ(first(far_first.compute()), 0.5);
  // A detection overlapping by IoU 0.58 (5.8x10 inside 10x10): found at .50 and .55, missed above.
  Detection partial(std::nullopt, std::nullopt, 1);
  partial.update(Value::tuple({at::tensor({0.f, 0.f, 5.8f, 10.f, .7f, 0.f}).reshape({1, 6}), gt}));
  EXPECT_NEAR(first(partial.compute()), 2.0 / 10, 1e-12);
  EXPECT_NEAR(second(partial.compute()), 2.0 / 10, 1e-12);
  // Inside a crowd box: neither found nor a false positive; no other ground truth: (-1, -1).
  Detection crowd(std::nullopt, std::nullopt, 1);
  crowd.update(Value::tuple({at::tensor({1.f, 1.f, 5.f, 5.f, .7f, 0.f}).reshape({1, 6}),
                             at::tensor({0.f, 0.f, 10.f, 10.f, 0.f, 1.f}).reshape({1, 6})}));
  EXPECT_DOUBLE_EQ(first(crowd.compute()), -1.0);
  EXPECT_DOUBLE_EQ(crowd.per_class()[0][0][0].item<double>(), -1.0);
}

TEST(ObjectDetectionTest, CocoTensorListToBatchPadsEachImage) {
  const std::vector<at::Tensor> pred{at::tensor({0.f, 0.f, 10.f, 10.f, .9f, 1.f}).reshape({1, 6}), at::zeros({0, 6})};
  const std::vector<at::Tensor> gt{at::tensor({0.f, 0.f, 10.f, 10.f, 1.f, 5.f, 5.f, 9.f, 9.f, 0.f}).reshape({2, 5}),
                                   at::tensor({1.f, 1.f, 4.f, 4.f, 0.f}).reshape({1, 5})};
  const Value batch = km::coco_tensor_list_to_batch(pred, gt);
  ASSERT_EQ(batch[0].sizes(), (std::vector<int64_t>{2, 1, 6}));
  ASSERT_EQ(batch[1].sizes(), (std::vector<int64_t>{2, 2, 5}));
  EXPECT_EQ(batch[0][1][0][5].item<double>(), -1) << "the empty image's row is padding";
  EXPECT_EQ(batch[1][1][1][4].item<double>(), -1);
  Detection whole(std::nullopt, std::nullopt, 2), by_image(std::nullopt, std::nullopt, 2);
  whole.update(batch);
  for (std::size_t i = 0; i < pred.size(); ++i) by_image.update(Value::tuple({pred[i], gt[i]}));
  EXPECT_TRUE(at::equal(whole.per_class(), by_image.per_class()));
  EXPECT_NE(error_of([&] {
              km::coco_tensor_list_to_batch(pred, {gt[0]});
            }).find("one tensor per image, the same number, at least one; got 2 and 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              km::coco_tensor_list_to_batch(pred, {gt[0], at::zeros({1, 6})});
            }).find("y[1] must be (M, 5) or (M, 6) rows (x1, y1, x2, y2, label[, iscrowd]) as y[0], got [1, 6]"),
            std::string::npos);
}

TEST(ObjectDetectionTest, MisuseIsRefusedAndChangesNothing) {
  Detection metric(std::nullopt, std::nullopt, 2);
  const at::Tensor gt = at::tensor({0.f, 0.f, 10.f, 10.f, 0.f}).reshape({1, 1, 5});
  metric.update(Value::tuple({at::tensor({0.f, 0.f, 10.f, 10.f, .9f, 0.f}).reshape({1, 1, 6}), gt}));
  const at::Tensor before = metric.per_class();
  EXPECT_NE(error_of([&] {
              metric.update(Value::tuple({at::zeros({1, 1, 5}), gt}));
            }).find("y_pred must be (B, N, 6) or (N, 6) rows (x1, y1, x2, y2, score, label), got [1, 1, 5]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              metric.update(Value::tuple({at::zeros({1, 1, 6}, at::kLong), gt}));
            }).find("y_pred must be floating point (it holds scores), got Long"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              metric.update(Value::tuple({at::zeros({2, 1, 6}), gt}));
            }).find("the same number of images, at least one, got 2 and 1"),
            std::string::npos);
  const at::Tensor bad_label = at::tensor({0.f, 0.f, 10.f, 10.f, 2.f}).reshape({1, 1, 5});
  EXPECT_NE(error_of([&] {
              metric.update(Value::tuple({at::zeros({1, 1, 6}), bad_label}));
            }).find("a label of y is 2, outside [0, num_classes = 2); negative labels mark padding rows"),
            std::string::npos);
  const at::Tensor half = at::tensor({0.f, 0.f, 10.f, 10.f, .5f, 0.5f}).reshape({1, 1, 6});
  EXPECT_NE(error_of([&] {
              metric.update(Value::tuple({half, gt}));
            }).find("the labels of y_pred (column 5) must be whole numbers, got 0.5"),
            std::string::npos);
  EXPECT_TRUE(at::equal(metric.per_class(), before));
  EXPECT_NE(error_of([] {
              Detection(std::vector<double>{0.5, 1.5});
            }).find("iou_thresholds must lie in [0, 1], got 1.5"),
            std::string::npos);
  EXPECT_NE(error_of([] { Detection(std::nullopt, std::nullopt, 0); }).find("num_classes must be at least 1, got 0"),
            std::string::npos);
}

}  // namespace object_detection_test
