#pragma once
// The exact computation the ranking metrics share (ROC_AUC, RocCurve, AveragePrecision,
// PrecisionRecallCurve): the kind of their input, the true and false positives at every
// distinct score threshold (scikit-learn's _binary_clf_curve), the binary problems of a
// multiclass or multilabel input and the average of their values. Internal to src/metrics/.
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "kindling/engine/value.h"
#include "kindling/metrics/ranking.h"

namespace kindling {
namespace detail {

/// The kinds of input of ranking.h.
enum class RankingTask { kBinary, kMulticlass, kMultilabel };

/// The kind of (y_pred, y) (a (N, 1) tensor counts as (N,)). Local. Throws
/// kindling::UsageError naming `who` for shapes or dtypes ranking.h does not accept, for the
/// (N, C) kinds when `binary_only`, and with `check_values` for values it does not accept
/// (non-finite scores, targets other than 0 and 1, class indices outside [0, C)). update()
/// checks without values: a value seen by one rank only must not make that rank alone throw
/// (the others would wait in compute's gather); the compute functions check the values, on
/// rank 0, whose failure EpochMetric::compute forwards to every rank.
RankingTask ranking_task(const at::Tensor& y_pred, const at::Tensor& y, const std::string& who, bool binary_only,
                         bool check_values);

/// Counts at each distinct score, highest first (T of them), in float64.
struct RankingCounts {
  at::Tensor thresholds;  // (T,) the distinct scores, decreasing
  at::Tensor tps;         // (T,) positives with score >= thresholds[i]
  at::Tensor fps;         // (T,) negatives with score >= thresholds[i]
  double positives = 0;   // tps[T - 1]
  double negatives = 0;   // fps[T - 1]
};

/// The counts of `scores` (N,) with `positive` (N,) bool; N > 0.
RankingCounts ranking_counts(const at::Tensor& scores, const at::Tensor& positive);

/// One binary problem of an input: its scores (N,), which samples are positive (N,) bool,
/// and how messages name it ("" for binary input, "class 2", "label 2", "the micro
/// average").
struct RankingColumn {
  at::Tensor scores, positive;
  std::string what;
};

/// The binary problems of (y_pred, y) of kind `task`: the input itself (binary), one per
/// class (one-vs-rest) or label, or with `micro` one over every (sample, class) pair.
std::vector<RankingColumn> ranking_columns(const at::Tensor& y_pred, const at::Tensor& y, RankingTask task, bool micro);

/// The value of per-problem `values` (from ranking_columns) as `average` says: the value
/// itself for one problem (binary input or micro), else the mean, the mean weighted by
/// `positives` (0 when no problem has a positive, as scikit-learn) or a (C,) float64 tensor.
engine::Value ranking_average(const std::vector<double>& values, const std::vector<double>& positives,
                              metrics::RankingMetric::Average average);

}  // namespace detail
}  // namespace kindling
