#pragma once
/// \file
/// RankingMetric: what the ranking metrics share (ROC_AUC and RocCurve in roc_auc.h,
/// AveragePrecision and PrecisionRecallCurve in average_precision.h): an EpochMetric that
/// keeps every score and target of the epoch, checks each batch's kind as it comes, and
/// computes exactly over the union of all ranks' samples (no binning; ties as scikit-learn).
///
/// The kinds of input, told from the shapes (a (N, 1) tensor counts as (N,)):
/// - binary:      y_pred (N,) scores or probabilities of the positive class, y (N,) in {0, 1};
/// - multiclass:  y_pred (N, C) per-class scores, y (N,) class indices in [0, C): each class
///                against the rest (one-vs-rest);
/// - multilabel:  y_pred (N, C) per-label scores, y (N, C) in {0, 1}: each label on its own.
/// y may have any real dtype (bool, integer or floating) holding those values. y_pred must be
/// finite. The curves (RocCurve, PrecisionRecallCurve) take the binary kind only.
///
/// \code
///   auto auc = std::make_shared<ROC_AUC>(OutputTransform(), ROC_AUC::Average::kWeighted);
///   auc->attach(evaluator, "roc_auc");
/// \endcode
///
/// Ranks: update() is local (its checks too). compute() is EpochMetric's: one gather of
/// every rank's samples (uneven or empty shards), the computation on rank 0 and a broadcast
/// of its result, so every rank returns rank 0's value or throws what rank 0 throws. The
/// warnings a computation logs (an average precision without positives, ...) come from rank
/// 0 only.

#include <string>

#include "kindling/metrics/epoch_metric.h"

namespace kindling {
namespace metrics {

/// The base of ROC_AUC, RocCurve, AveragePrecision and PrecisionRecallCurve. Not used directly.
class KINDLING_API RankingMetric : public EpochMetric {
 public:
  /// How ROC_AUC and AveragePrecision combine the per-class (per-label) values of
  /// multiclass and multilabel input (scikit-learn's `average`); ignored for binary input,
  /// whose value is always a number. Write ROC_AUC::Average::kMacro.
  enum class Average {
    kMacro,     // 'macro' (the default): the unweighted mean over classes, a number
    kWeighted,  // 'weighted': the mean weighted by each class's number of positives, a number
    kMicro,     // 'micro': one binary problem over every (sample, class) pair, a number
    kNone,      // None: the per-class values, a (C,) float64 tensor
  };

 protected:
  /// `binary_only`: refuse the (N, C) kinds (the curves). Throws kindling::UsageError for an
  /// empty compute_fn.
  RankingMetric(ComputeFunction compute_fn, bool binary_only, OutputTransform output_transform, bool check_compute_fn,
                c10::Device device);
  /// Throws kindling::UsageError naming the metric for a batch of another kind than the
  /// header above lists: shapes that do not pair, binary or multilabel targets other than
  /// 0 and 1, class indices outside [0, C), non-finite scores, (N, C) input to a curve.
  void check_input(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  bool binary_only_;
};

/// scikit-learn's spelling: "macro", "weighted", "micro", "None".
KINDLING_API const char* to_string(RankingMetric::Average average);

}  // namespace metrics
}  // namespace kindling
