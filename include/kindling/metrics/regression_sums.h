#pragma once
/// \file
/// The metrics of ignite.metrics.regression that are sums over samples, reduced across ranks
/// exactly (float64 sums and a row count, summed at compute): CanberraMetric,
/// FractionalAbsoluteError, FractionalBias, GeometricMeanAbsoluteError, ManhattanDistance,
/// MaximumAbsoluteError, MeanAbsoluteRelativeError, MeanError, MeanNormalizedBias,
/// WaveHedgesDistance, R2Score and PearsonCorrelation. Inputs as ignite's: y_pred and y of
/// shape (N,) or (N, 1), the same shape, floating point (float16, float32 or float64).
///
/// \code
///   auto r2 = std::make_shared<kindling::metrics::R2Score>();
///   r2->attach(evaluator, "r2");
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order). Checkpointed and resharded to another world size by sums (Reshard::kSum; the
/// maximum of MaximumAbsoluteError by Reshard::kMax). ignite sums in float32 where kindling sums
/// in float64: values agree to float32's rounding (tests/metrics/regression_sums_test.cpp).

#include <string>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// What the sum-based regression metrics share: the input checks, one float64 sum per term
/// and the number of rows. A subclass names its terms (their state-dict keys, ignite's) and
/// says what one batch adds to each (terms()) and what the sums give (compute()).
class KINDLING_API RegressionSums : public Metric {
 public:
  void reset() override;
  /// Throws kindling::UsageError naming the metric when y_pred or y is not of shape (N,) or
  /// (N, 1), their shapes differ, or one is not floating point; a subclass may refuse values
  /// (NotComputableError). Stores nothing from a refused batch.
  void update(const Value& output) override;

 protected:
  /// `keys`: the state-dict names of the sums, in terms()' order; `rows_key`: that of the row
  /// count ("" where ignite keeps none: the metric is a plain sum, 0 before any input).
  RegressionSums(std::vector<std::string> keys, std::string rows_key, OutputTransform output_transform,
                 c10::Device device);
  /// One batch's addition to each sum, from y_pred and y of shape (N,) in float64.
  virtual std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const = 0;
  /// The sums over every rank (a collective), in terms()' order; `rows` gets the row count.
  /// Throws NotComputableError when `need_rows` and no rank saw a row.
  std::vector<double> reduced_sums(int64_t& rows, bool need_rows = true) const;
  /// The first sum over every rank divided by every rank's rows (a collective). Throws
  /// NotComputableError when no rank saw a row.
  double reduced_mean() const;
  /// The first sum over every rank (a collective): 0 before any input.
  double reduced_total() const;

 private:
  std::vector<at::Tensor> sums_;  // float64, one per key; never resized (registered slots)
  int64_t rows_ = 0;
};

/// sum |y - y_pred| / (|y_pred| + |y| + 1e-15) over every sample (0 before any input).
class KINDLING_API CanberraMetric : public RegressionSums {
 public:
  explicit CanberraMetric(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// The sum over every rank (a collective).
  Value compute() override;
  std::string name() const override { return "CanberraMetric"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The mean of 2 |y - y_pred| / (|y_pred| + |y|).
class KINDLING_API FractionalAbsoluteError : public RegressionSums {
 public:
  explicit FractionalAbsoluteError(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// The mean over every rank's samples (a collective). Throws NotComputableError when no
  /// rank saw a sample.
  Value compute() override;
  std::string name() const override { return "FractionalAbsoluteError"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The mean of 2 (y - y_pred) / (y_pred + y + 1e-30).
class KINDLING_API FractionalBias : public RegressionSums {
 public:
  explicit FractionalBias(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// As FractionalAbsoluteError::compute.
  Value compute() override;
  std::string name() const override { return "FractionalBias"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// exp of the mean of log |y - y_pred| (0 where a sample is exact, as ignite's: log 0 = -inf).
class KINDLING_API GeometricMeanAbsoluteError : public RegressionSums {
 public:
  explicit GeometricMeanAbsoluteError(OutputTransform output_transform = {},
                                      c10::Device device = c10::Device(c10::kCPU));
  /// As FractionalAbsoluteError::compute.
  Value compute() override;
  std::string name() const override { return "GeometricMeanAbsoluteError"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// sum |y - y_pred| over every sample (0 before any input).
class KINDLING_API ManhattanDistance : public RegressionSums {
 public:
  explicit ManhattanDistance(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// The sum over every rank (a collective).
  Value compute() override;
  std::string name() const override { return "ManhattanDistance"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The mean of |y_pred - y| / |y|. A batch whose y holds a 0 is refused.
class KINDLING_API MeanAbsoluteRelativeError : public RegressionSums {
 public:
  explicit MeanAbsoluteRelativeError(OutputTransform output_transform = {},
                                     c10::Device device = c10::Device(c10::kCPU));
  /// As FractionalAbsoluteError::compute.
  Value compute() override;
  std::string name() const override { return "MeanAbsoluteRelativeError"; }

 protected:
  /// Throws NotComputableError naming the first row whose y is 0.
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The mean of y - y_pred.
class KINDLING_API MeanError : public RegressionSums {
 public:
  explicit MeanError(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// As FractionalAbsoluteError::compute.
  Value compute() override;
  std::string name() const override { return "MeanError"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The mean of (y - y_pred) / y. A batch whose y holds a 0 is refused.
class KINDLING_API MeanNormalizedBias : public RegressionSums {
 public:
  explicit MeanNormalizedBias(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// As FractionalAbsoluteError::compute.
  Value compute() override;
  std::string name() const override { return "MeanNormalizedBias"; }

 protected:
  /// Throws NotComputableError naming the first row whose y is 0.
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// sum |y - y_pred| / (max(y_pred, y) + 1e-30) over every sample (0 before any input).
class KINDLING_API WaveHedgesDistance : public RegressionSums {
 public:
  explicit WaveHedgesDistance(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// The sum over every rank (a collective).
  Value compute() override;
  std::string name() const override { return "WaveHedgesDistance"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The coefficient of determination: 1 - sum (y_pred - y)^2 / (sum y^2 - (sum y)^2 / N).
class KINDLING_API R2Score : public RegressionSums {
 public:
  explicit R2Score(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// Over every rank's samples (a collective). Throws NotComputableError when no rank saw a
  /// sample. A constant y (zero variance) gives -inf (nan when y_pred equals y too), or a
  /// large finite value where the float64 variance does not round to 0; ignite 0.5.5 raises
  /// ZeroDivisionError where its float32 variance is exactly 0 (docs/coming-from-ignite.md).
  Value compute() override;
  std::string name() const override { return "R2Score"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// Pearson's r of y_pred and y: cov / max(sqrt(var(y_pred) var(y)), eps), the variances the
/// population ones (clamped at 0), as ignite's.
class KINDLING_API PearsonCorrelation : public RegressionSums {
 public:
  explicit PearsonCorrelation(double eps = 1e-8, OutputTransform output_transform = {},
                              c10::Device device = c10::Device(c10::kCPU));
  /// Over every rank's samples (a collective). Throws NotComputableError when no rank saw a
  /// sample.
  Value compute() override;
  std::string name() const override { return "PearsonCorrelation"; }

 protected:
  std::vector<at::Tensor> terms(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  double eps_;
};

/// The largest |y_pred - y| of every sample on every rank. As ignite's, a batch whose largest
/// error is NaN (a NaN in y_pred or y) is skipped whole, so the value is that of the other
/// batches at every world size, wherever that batch was; an inf counts (the value is inf).
class KINDLING_API MaximumAbsoluteError : public Metric {
 public:
  explicit MaximumAbsoluteError(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Local. Throws as RegressionSums::update, and kindling::UsageError for an empty batch
  /// (ignite refuses one too); skips a batch holding a NaN (see the class).
  void update(const Value& output) override;
  /// The maximum over every rank (a collective). Throws NotComputableError when no rank kept a
  /// batch (none seen, or only batches with a NaN, as ignite).
  Value compute() override;
  std::string name() const override { return "MaximumAbsoluteError"; }

 private:
  at::Tensor max_;  // float64, -1 before any input (ignite's sentinel)
};

}  // namespace metrics
}  // namespace kindling
