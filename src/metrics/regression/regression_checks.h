#pragma once
// The input rules of ignite.metrics.regression, shared by the sum-based metrics
// (regression_sums.cpp) and those over every sample (regression_epoch.cpp). Internal to
// src/metrics/.
#include <ATen/core/Tensor.h>

#include <string>

namespace kindling {
namespace detail {

/// Refuses y_pred and y unless each has shape (N,) or (N, 1), both the same shape, and both
/// are floating point: throws kindling::UsageError naming `metric` and what was given.
void check_regression_pair(const std::string& metric, const at::Tensor& y_pred, const at::Tensor& y);

/// Refuses a y that holds 0 (the metric divides by y): throws NotComputableError naming
/// `metric` and the first such row of the batch.
void refuse_zero_targets(const std::string& metric, const at::Tensor& y);

}  // namespace detail
}  // namespace kindling
