#pragma once
/// \file
/// Means over samples of a per-sample value of y_pred and y, reduced across ranks exactly
/// (a float64 sum and a sample count, summed at compute): CosineSimilarity,
/// MeanPairwiseDistance and PSNR (ignite's), and the base of Entropy, KLDivergence and
/// JSDivergence (kindling/metrics/information.h). Inputs of shape (N, ...): a value per row.
///
/// \code
///   auto psnr = std::make_shared<kindling::metrics::PSNR>(1.0);   // images in [0, 1]
///   psnr->attach(evaluator, "psnr");
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it). Checkpointed and
/// resharded to another world size by sums. ignite sums cosine similarities and distances in
/// float32 where kindling sums in float64 (tests/metrics/sample_means_test.cpp).

#include <string>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// What these metrics share: the float64 sum of one value per sample and the sample count.
class KINDLING_API SampleMean : public Metric {
 public:
  void reset() override;
  /// Throws kindling::UsageError naming the metric when y_pred and y cannot give one value per
  /// row (see each metric); stores nothing then.
  void update(const Value& output) override;
  /// The sum over every rank divided by every rank's samples (a collective). Throws
  /// NotComputableError when no rank saw a sample.
  Value compute() override;

 protected:
  /// `sum_key`: the state-dict name of the sum (ignite's); `uses_y`: whether update() reads y
  /// (and checks that it has as many rows as y_pred) or only y_pred.
  SampleMean(const std::string& sum_key, OutputTransform output_transform, c10::Device device, bool uses_y = true);
  /// One value per sample of y_pred and y, a 1-D tensor whose length is the number of samples
  /// counted (N, or more where a sample is a position of a (N, C, ...) map); throws
  /// kindling::UsageError for input it cannot use. y is undefined where uses_y is false.
  virtual at::Tensor per_sample(const at::Tensor& y_pred, const at::Tensor& y) const = 0;
  /// What compute() multiplies the mean by (JSDivergence sums two divergences per sample, as
  /// ignite's state does, and halves them at compute).
  double scale_ = 1.0;

 private:
  at::Tensor sum_;  // float64
  int64_t num_examples_ = 0;
  bool uses_y_;
};

/// The mean cosine similarity of the rows of y_pred and y, each flattened from dimension 1
/// (torch's cosine_similarity with `eps`).
class KINDLING_API CosineSimilarity : public SampleMean {
 public:
  explicit CosineSimilarity(double eps = 1e-8, OutputTransform output_transform = {},
                            c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "CosineSimilarity"; }

 protected:
  at::Tensor per_sample(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  double eps_;
};

/// The mean p-norm distance of the rows of y_pred and y (torch's pairwise_distance: the norm
/// of y_pred - y + eps over the last dimension).
class KINDLING_API MeanPairwiseDistance : public SampleMean {
 public:
  explicit MeanPairwiseDistance(double p = 2, double eps = 1e-6, OutputTransform output_transform = {},
                                c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "MeanPairwiseDistance"; }

 protected:
  at::Tensor per_sample(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  double p_, eps_;
};

/// Peak signal-to-noise ratio: the mean over samples of 10 log10(data_range^2 / (mse + 1e-10)),
/// mse over each sample's elements, in float64.
class KINDLING_API PSNR : public SampleMean {
 public:
  /// `data_range`: the range of the values (1 for images in [0, 1], 255 for bytes). Throws
  /// kindling::UsageError when it is not positive.
  explicit PSNR(double data_range, OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "PSNR"; }

 protected:
  /// Throws kindling::UsageError when y_pred and y differ in dtype or shape (as ignite), or are
  /// 1-D (ignite then takes one value for the whole batch and counts it N times).
  at::Tensor per_sample(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  double data_range_;
};

}  // namespace metrics
}  // namespace kindling
