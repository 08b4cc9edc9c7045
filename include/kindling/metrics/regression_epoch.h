#pragma once
/// \file
/// The metrics of ignite.metrics.regression that need every sample at once: the medians
/// (MedianAbsoluteError, MedianAbsolutePercentageError, MedianRelativeAbsoluteError),
/// GeometricMeanRelativeAbsoluteError (its relative errors are to the mean of every target) and
/// the rank correlations (SpearmanRankCorrelation, KendallRankCorrelation). Inputs as ignite's:
/// y_pred and y of shape (N,) or (N, 1), the same shape, floating point. Computed in float64
/// (ignite in the input's dtype, float32 mostly; scipy for the rank correlations): values agree
/// to float32's rounding (tests/metrics/regression_epoch_test.cpp).
///
/// \code
///   auto mdae = std::make_shared<kindling::metrics::MedianAbsoluteError>();
///   mdae->attach(evaluator, "mdae");
///   auto tau = std::make_shared<kindling::metrics::KendallRankCorrelation>(
///       kindling::metrics::KendallRankCorrelation::Variant::kC);
///   tau->attach(evaluator, "kendall_tau_c");
/// \endcode
///
/// Ranks: as EpochMetric (epoch_metric.h): update() stores this rank's samples; compute()
/// gathers every rank's (ranks may hold different numbers, or none), computes on rank 0 and
/// broadcasts the value, a collective on every rank. Checkpointed with the samples and
/// resharded to another world size by concatenation.

#include <string>

#include "kindling/metrics/epoch_metric.h"

namespace kindling {
namespace metrics {

/// The medians' functions of all predictions and targets (ignite's
/// median_absolute_error_compute_fn, median_absolute_percentage_error_compute_fn and
/// median_relative_absolute_error_compute_fn), for an EpochMetric of one's own: y_pred and y
/// with the same number of elements, any floating dtype, in float64; of an even count, the mean
/// of the middle two. Local. Throw kindling::UsageError when the counts differ or are 0.
KINDLING_API double median_absolute_error(const at::Tensor& y_pred, const at::Tensor& y);
/// 100 times the median of |y - y_pred| / |y| (see median_absolute_error; a y of 0 gives an
/// infinite or NaN term, as in ignite).
KINDLING_API double median_absolute_percentage_error(const at::Tensor& y_pred, const at::Tensor& y);
/// The median of |y - y_pred| / |y - mean(y)| (see median_absolute_error).
KINDLING_API double median_relative_absolute_error(const at::Tensor& y_pred, const at::Tensor& y);

/// What these metrics share: ignite's regression input checks on top of EpochMetric.
class KINDLING_API RegressionEpochMetric : public EpochMetric {
 protected:
  RegressionEpochMetric(ComputeFunction compute_fn, OutputTransform output_transform, bool check_compute_fn,
                        c10::Device device);
  /// Throws kindling::UsageError naming the metric when y_pred or y is not of shape (N,) or
  /// (N, 1), their shapes differ, or one is not floating point; nothing is stored then.
  void check_input(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The median of |y - y_pred| over every rank's samples (of an even number of samples, the
/// mean of the middle two, as ignite's).
class KINDLING_API MedianAbsoluteError : public RegressionEpochMetric {
 public:
  explicit MedianAbsoluteError(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// A collective on every rank. Throws NotComputableError when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "MedianAbsoluteError"; }
};

/// 100 times the median of |y - y_pred| / |y|. update() refuses a batch whose y holds 0
/// (NotComputableError naming the row; nothing of the batch is stored).
class KINDLING_API MedianAbsolutePercentageError : public RegressionEpochMetric {
 public:
  explicit MedianAbsolutePercentageError(OutputTransform output_transform = {},
                                         c10::Device device = c10::Device(c10::kCPU));
  /// A collective on every rank. Throws NotComputableError when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "MedianAbsolutePercentageError"; }

 protected:
  void check_input(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The median of |y - y_pred| / |y - mean(y)|, the mean over every rank's targets (a target
/// equal to it gives an infinite term, as in ignite).
class KINDLING_API MedianRelativeAbsoluteError : public RegressionEpochMetric {
 public:
  explicit MedianRelativeAbsoluteError(OutputTransform output_transform = {},
                                       c10::Device device = c10::Device(c10::kCPU));
  /// A collective on every rank. Throws NotComputableError when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "MedianRelativeAbsoluteError"; }
};

/// exp(mean(log(|y - y_pred| / |y - mean(y)|))), the mean over every rank's targets (an exact
/// prediction makes it 0, as in ignite).
class KINDLING_API GeometricMeanRelativeAbsoluteError : public RegressionEpochMetric {
 public:
  explicit GeometricMeanRelativeAbsoluteError(OutputTransform output_transform = {},
                                              c10::Device device = c10::Device(c10::kCPU));
  /// A collective on every rank. Throws NotComputableError when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "GeometricMeanRelativeAbsoluteError"; }
};

/// Spearman's rank correlation of y_pred and y (scipy.stats.spearmanr, which ignite calls):
/// the Pearson correlation of their ranks, tied values taking the mean of their ranks.
class KINDLING_API SpearmanRankCorrelation : public RegressionEpochMetric {
 public:
  /// With `check_compute_fn` (ignite's default) the first batch after each reset is tried and a
  /// failure logged as a warning.
  explicit SpearmanRankCorrelation(OutputTransform output_transform = {}, bool check_compute_fn = true,
                                   c10::Device device = c10::Device(c10::kCPU));
  /// A collective on every rank: NaN when y_pred or y is constant (scipy's answer, with a
  /// warning there). Throws NotComputableError when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "SpearmanRankCorrelation"; }
};

/// Kendall's rank correlation of y_pred and y (scipy.stats.kendalltau, which ignite calls), in
/// O(N log N) for N samples.
class KINDLING_API KendallRankCorrelation : public RegressionEpochMetric {
 public:
  /// kB: tau-b, adjusted for ties (ignite's default "b"); kC: Stuart's tau-c ("c").
  enum class Variant { kB, kC };
  /// With `check_compute_fn` (ignite's default) the first batch after each reset is tried and a
  /// failure logged as a warning.
  explicit KendallRankCorrelation(Variant variant = Variant::kB, OutputTransform output_transform = {},
                                  bool check_compute_fn = true, c10::Device device = c10::Device(c10::kCPU));
  /// The variant given to the constructor. Local; does not throw.
  Variant variant() const { return variant_; }
  /// A collective on every rank: NaN when y_pred or y is constant. Throws NotComputableError
  /// when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "KendallRankCorrelation"; }

 private:
  Variant variant_;
};

}  // namespace metrics
}  // namespace kindling
