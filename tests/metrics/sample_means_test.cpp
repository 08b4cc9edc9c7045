// CosineSimilarity, MeanPairwiseDistance and PSNR (kindling/metrics/sample_means.h): equal to
// the real ignite 0.5.5 on the same batches (tests/metrics/ignite_cases.py, where the build's
// Python has it: the LibTorch 2.15 venv), to values worked by hand, and they refuse misuse with
// what they were given. Across ranks (1, 2 and 3 with an empty shard, gloo and mpi):
// distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/sample_means.h"
#include "kindling/metrics/ssim.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace sample_means_test {

std::vector<kindling::testing::IgniteCase> cases() {
  using kindling::testing::batches_of;
  using Batch = kindling::testing::MetricBatch;
  const auto vectors = batches_of(21, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randn({n, 5}, g);
    return Batch{y + 0.5 * at::randn({n, 5}, g), y};
  });
  const auto images = batches_of(22, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::rand({n, 2, 4, 4}, g);
    return Batch{(y + 0.1 * at::randn({n, 2, 4, 4}, g)).clamp(0, 1), y};
  });
  const auto pictures = batches_of(23, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::rand({n, 3, 16, 16}, g);
    return Batch{(y + 0.2 * at::randn({n, 3, 16, 16}, g)).clamp(0, 1), y};
  });
  const auto volumes = batches_of(24, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::rand({n, 1, 5, 6, 7}, g);
    return Batch{(y + 0.1 * at::randn({n, 1, 5, 6, 7}, g)).clamp(0, 1), y};
  });
  return {
      {"cosine", "CosineSimilarity", "{}", vectors, [] { return std::make_shared<km::CosineSimilarity>(); }},
      {"cosine_images", "CosineSimilarity", R"({"eps": 1e-6})", images,
       [] { return std::make_shared<km::CosineSimilarity>(1e-6); }},
      {"pairwise", "MeanPairwiseDistance", "{}", vectors, [] { return std::make_shared<km::MeanPairwiseDistance>(); }},
      {"pairwise_p1", "MeanPairwiseDistance", R"({"p": 1, "eps": 1e-4})", vectors,
       [] { return std::make_shared<km::MeanPairwiseDistance>(1, 1e-4); }},
      {"psnr", "PSNR", R"({"data_range": 1.0})", images, [] { return std::make_shared<km::PSNR>(1.0); }},
      {"ssim_small_window", "SSIM", R"({"data_range": 1.0, "kernel_size": 3, "sigma": 0.8})", images,
       [] { return std::make_shared<km::SSIM>(1.0, std::vector<int64_t>{3}, std::vector<double>{0.8}); }},
      {"ssim", "SSIM", R"({"data_range": 1.0})", pictures, [] { return std::make_shared<km::SSIM>(1.0); }},
      {"ssim_uniform", "SSIM", R"({"data_range": 2.0, "kernel_size": [7, 5], "gaussian": false})", pictures,
       [] {
         return std::make_shared<km::SSIM>(2.0, std::vector<int64_t>{7, 5}, std::vector<double>{1.5}, 0.01, 0.03,
                                           false);
       }},
      {"ssim_3d", "SSIM", R"({"data_range": 1.0, "kernel_size": 3, "sigma": 1.0, "ndims": 3})", volumes,
       [] {
         return std::make_shared<km::SSIM>(1.0, std::vector<int64_t>{3}, std::vector<double>{1.0}, 0.01, 0.03, true,
                                           nullptr, c10::Device(c10::kCPU), 3);
       }},
  };
}

TEST(SampleMeansTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(cases()); }

TEST(SampleMeansTest, ValuesWorkedByHand) {
  // Rows (1, 0) against (1, 0) and (0, 2) against (0, -1): cosines 1 and -1.
  km::CosineSimilarity cosine;
  cosine.update(Value::tuple(
      {at::tensor({1.0, 0.0, 0.0, 2.0}).reshape({2, 2}), at::tensor({1.0, 0.0, 0.0, -1.0}).reshape({2, 2})}));
  EXPECT_NEAR(cosine.compute().number(), 0.0, 1e-12);
  // Distances |(3, 4) + eps| = 5 and |(0, 0) + eps| = sqrt(2) eps, eps 1e-6.
  km::MeanPairwiseDistance distance;
  distance.update(Value::tuple(
      {at::tensor({3.0, 4.0, 1.0, 1.0}).reshape({2, 2}), at::tensor({0.0, 0.0, 1.0, 1.0}).reshape({2, 2})}));
  EXPECT_NEAR(distance.compute().number(), (std::hypot(3 + 1e-6, 4 + 1e-6) + std::sqrt(2.0) * 1e-6) / 2, 1e-12);
  // One sample of 4 values off by 0.1 in [0, 1]: mse 0.01, 10 log10(1 / (0.01 + 1e-10)).
  km::PSNR psnr(1.0);
  psnr.update(Value::tuple({at::full({1, 4}, 0.6, at::kDouble), at::full({1, 4}, 0.5, at::kDouble)}));
  EXPECT_NEAR(psnr.compute().number(), 10 * std::log10(1 / (0.01 + 1e-10)), 1e-9);
}

TEST(SampleMeansTest, SsimOfAnImageWithItselfIsOneAndMisuseIsRefused) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  const at::Tensor image = at::rand({2, 3, 12, 12}, gen);
  km::SSIM ssim(1.0, {5});
  ssim.update(Value::tuple({image, image}));
  EXPECT_NEAR(ssim.compute().number(), 1.0, 1e-6);
  EXPECT_NE(error_of([&] {
              ssim.update(Value::tuple({image, image.to(at::kDouble)}));
            }).find("SSIM: y_pred and y must have the same dtype, but given Float and Double"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ssim.update(Value::tuple({image[0], image[0]}));
            }).find("SSIM: y_pred and y must have the same shape, (N, C, H, W), but given [3, 12, 12]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ssim.update(Value::tuple({image.slice(3, 0, 2), image.slice(3, 0, 2)}));
            }).find("are too small for the window [5, 5]"),
            std::string::npos);
  EXPECT_NE(error_of([] { km::SSIM bad(1.0, {4}); }).find("kernel sizes must be odd and positive, got 4"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              km::SSIM bad(1.0, {3, 3, 3});
            }).find("kernel_size must hold one value or 2"),
            std::string::npos);
}

TEST(SampleMeansTest, MisuseIsRefusedWithWhatWasGivenAndStoresNothing) {
  km::PSNR psnr(255);
  EXPECT_NE(error_of<km::NotComputableError>([&] { psnr.compute(); }).find("PSNR must have at least one example"),
            std::string::npos);
  psnr.update(Value::tuple({at::full({1, 3}, 10.0), at::full({1, 3}, 12.0)}));
  const double before = psnr.compute().number();
  EXPECT_NE(error_of([&] {
              psnr.update(Value::tuple({at::ones({2, 3}), at::ones({2, 3}, at::kDouble)}));
            }).find("PSNR: y_pred and y must have the same dtype, but given Float and Double"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              psnr.update(Value::tuple({at::ones({2, 3}), at::ones({2, 4})}));
            }).find("PSNR: y_pred and y must have the same shape, but given [2, 3] and [2, 4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              psnr.update(Value::tuple({at::ones({3}), at::ones({3})}));
            }).find("PSNR: y_pred and y must have shape (N, ...), a sample of one or more values per row"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              psnr.update(Value::tuple({at::ones({2, 3}), at::ones({3, 3})}));
            }).find("must hold the same number of samples, but given [2, 3] and [3, 3]"),
            std::string::npos);
  EXPECT_EQ(psnr.compute().number(), before);
  EXPECT_NE(error_of([] { km::PSNR(0.0); }).find("data_range must be a positive number"), std::string::npos);
  km::MeanPairwiseDistance distance;
  EXPECT_NE(error_of([&] {
              distance.update(Value::tuple({at::ones({2, 3, 1}), at::ones({2, 3, 1})}));
            }).find("MeanPairwiseDistance: y_pred and y must have the same shape (N, D), but given [2, 3, 1]"),
            std::string::npos);
}

}  // namespace sample_means_test
