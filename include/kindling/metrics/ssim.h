#pragma once
/// \file
/// SSIM (ignite's): the mean structural similarity of images, (N, C, H, W) or, with ndims 3,
/// (N, C, D, H, W): local means, variances and covariance under a Gaussian (or uniform)
/// window with reflected borders, per channel; each sample's index map averaged, then the mean
/// over samples. Computed in the input's floating dtype as ignite (integers as float32), each
/// sample's mean in float64; a float64 sum and a sample count, summed over ranks.
///
/// \code
///   auto ssim = std::make_shared<kindling::metrics::SSIM>(1.0);   // images in [0, 1]
///   ssim->attach(evaluator, "ssim");
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it). Checkpointed and
/// resharded to another world size by sums.

#include <string>
#include <vector>

#include "kindling/metrics/sample_means.h"

namespace kindling {
namespace metrics {

class KINDLING_API SSIM : public SampleMean {
 public:
  /// `data_range`: the range of the values (1 for [0, 1], 255 for bytes). `kernel_size` and
  /// `sigma`: one value for every spatial dimension, or one each (ndims of them); odd sizes,
  /// positive sigmas. `gaussian` false: a uniform window of 5 (ignite's). Throws
  /// kindling::UsageError for a data_range that is not positive, ndims other than 2 or 3, or
  /// kernel sizes or sigmas of another count or out of range.
  explicit SSIM(double data_range, std::vector<int64_t> kernel_size = {11}, std::vector<double> sigma = {1.5},
                double k1 = 0.01, double k2 = 0.03, bool gaussian = true, OutputTransform output_transform = {},
                c10::Device device = c10::Device(c10::kCPU), int64_t ndims = 2);
  std::string name() const override { return "SSIM"; }

 protected:
  /// Throws kindling::UsageError when y_pred and y differ in dtype or shape, or are not
  /// (N, C, H, W) (ndims 2) or (N, C, D, H, W) (ndims 3), or are smaller than the window.
  at::Tensor per_sample(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  std::vector<int64_t> kernel_size_;
  at::Tensor kernel_;  // (k0, k1[, k2]) float64
  double c1_, c2_;
  int64_t ndims_;
};

}  // namespace metrics
}  // namespace kindling
