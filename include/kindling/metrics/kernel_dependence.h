#pragma once
/// \file
/// Kernel statistics estimated per batch and averaged over batches (ignite's): HSIC (the
/// Hilbert-Schmidt independence criterion of y_pred and y) and MaximumMeanDiscrepancy (of the
/// samples x and y). Gaussian RBF kernels over the rows, each sample flattened from
/// dimension 1; computed in float64.
///
/// \code
///   auto hsic = std::make_shared<kindling::metrics::HSIC>();   // (features, targets)
///   hsic->attach(evaluator, "hsic");
/// \endcode
///
/// The value is the mean over every rank's batches (as ignite's): the same as one process when
/// the batches are the same, whichever rank saw them. Ranks: update() is local; compute() is a
/// collective (every rank calls it, in the same order). Checkpointed and resharded to another
/// world size by sums (Reshard::kSum).
///
/// ignite computes in the input's dtype and kindling in float64: on float32 input the two
/// differ by float32's rounding. HSIC's values (below 1) agree within 1e-6 absolute
/// (KernelDependenceTest), but not within 1e-6 relative: 20 random float32 batches of 16 gave
/// up to 1.1e-5 relative (1.5e-7 absolute) against ignite 0.5.5 given the same batches in
/// float64. ignite keeps MaximumMeanDiscrepancy's sums in float32 whatever the input.

#include <string>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// What the two share: one float64 sum per term of a batch's estimate and the batch count.
class KINDLING_API BatchMean : public Metric {
 public:
  void reset() override;
  /// Throws kindling::UsageError naming the metric for input it cannot use (see each
  /// metric); stores nothing then.
  void update(const Value& output) override;
  /// The terms summed over every rank's batches, combined by the metric (a collective).
  /// Throws NotComputableError when no rank saw a batch.
  Value compute() override;

 protected:
  /// `keys`: the state-dict names of the sums (ignite's), in batch_terms()' order.
  BatchMean(std::vector<std::string> keys, OutputTransform output_transform, c10::Device device);
  /// One batch's terms (float64 0-dim tensors), or none to skip the batch; y_pred and y are
  /// (B, D) float64, B the same.
  virtual std::vector<at::Tensor> batch_terms(const at::Tensor& y_pred, const at::Tensor& y) const = 0;
  /// The value from the summed terms and the number of batches (at least 1).
  virtual double combine(const std::vector<double>& sums, int64_t batches) const = 0;

 private:
  std::vector<at::Tensor> sums_;  // float64, one per key; never resized (registered slots)
  int64_t num_batches_ = 0;
};

/// The unbiased HSIC estimator of Song et al. (2012, eq. 5) per batch, clamped at 0, averaged
/// over batches. A batch needs at least 4 samples.
class KINDLING_API HSIC : public BatchMean {
 public:
  /// `sigma_x`, `sigma_y`: the kernels' bandwidths; negative: the median of the batch's squared
  /// distances is the kernel's variance (ignite's heuristic). `ignore_invalid_batch`: skip a
  /// batch of fewer than 4 samples (else update() throws kindling::UsageError).
  explicit HSIC(double sigma_x = -1, double sigma_y = -1, bool ignore_invalid_batch = true,
                OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "HSIC"; }

 protected:
  std::vector<at::Tensor> batch_terms(const at::Tensor& x, const at::Tensor& y) const override;
  double combine(const std::vector<double>& sums, int64_t batches) const override;

 private:
  double sigma_x_, sigma_y_;
  bool ignore_invalid_batch_;
};

/// The square root of the mean over batches of the unbiased squared MMD (Gretton et al.
/// 2012) with the kernel exp(-|a - b|^2 / (2 var)), clamped at 0 as ignite's (a NaN stays
/// NaN: a NaN or inf in x or y gives NaN). x and y of the same shape (B, ...), B at least 2.
class KINDLING_API MaximumMeanDiscrepancy : public BatchMean {
 public:
  /// `var`: the kernel's bandwidth sigma^2. Throws kindling::UsageError when it is not positive.
  explicit MaximumMeanDiscrepancy(double var = 1.0, OutputTransform output_transform = {},
                                  c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "MaximumMeanDiscrepancy"; }

 protected:
  std::vector<at::Tensor> batch_terms(const at::Tensor& x, const at::Tensor& y) const override;
  double combine(const std::vector<double>& sums, int64_t batches) const override;

 private:
  double var_;
};

}  // namespace metrics
}  // namespace kindling
