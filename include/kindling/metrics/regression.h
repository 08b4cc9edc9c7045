#pragma once
/// \file
/// MeanSquaredError, MeanAbsoluteError and RootMeanSquaredError (ignite's). As ignite, the
/// errors of every element are summed but the divisor is the number of rows (y.size(0)), so
/// for (N, D) inputs MSE = (1/N) sum_i ||y_pred_i - y_i||^2 (summed over the D features).
///
/// \code
///   auto mse = std::make_shared<MeanSquaredError>();
///   mse->attach(evaluator, "mse");
/// \endcode
///
/// Ranks: update() is local; compute() sums the errors and row counts over ranks (a
/// collective on every rank).

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API MeanSquaredError : public Metric {
 public:
  explicit MeanSquaredError(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError when y is 0-dim or y_pred and y differ in their number of
  /// elements (y is viewed as y_pred's shape, as ignite's view_as: (N, 1) against (N,) is fine).
  void update(const Value& output) override;
  /// sum of squared errors / rows over all ranks (a collective). Throws NotComputableError
  /// when no rank saw a row.
  Value compute() override;
  std::string name() const override { return "MeanSquaredError"; }

 private:
  at::Tensor sum_;  // float64
  int64_t num_examples_ = 0;
};

class KINDLING_API MeanAbsoluteError : public Metric {
 public:
  explicit MeanAbsoluteError(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws as MeanSquaredError::update.
  void update(const Value& output) override;
  /// sum of absolute errors / rows over all ranks (a collective). Throws NotComputableError
  /// when no rank saw a row.
  Value compute() override;
  std::string name() const override { return "MeanAbsoluteError"; }

 private:
  at::Tensor sum_;  // float64
  int64_t num_examples_ = 0;
};

/// sqrt(MeanSquaredError).
class KINDLING_API RootMeanSquaredError : public MeanSquaredError {
 public:
  explicit RootMeanSquaredError(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// sqrt of MeanSquaredError::compute() (a collective). Throws NotComputableError when no
  /// rank saw a row.
  Value compute() override;
  std::string name() const override { return "RootMeanSquaredError"; }
};

}  // namespace metrics
}  // namespace kindling
