#pragma once
/// \file
/// RankingMetric: what the ranking metrics share (ROC_AUC and RocCurve in roc_auc.h,
/// AveragePrecision and PrecisionRecallCurve in average_precision.h): an EpochMetric that
/// keeps every score and target of the epoch, checks each batch's shapes as it comes, and
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
/// Where misuse is reported: shapes and dtypes that fit no kind (and (N, C) input to a curve)
/// at update(), which throws kindling::UsageError and stores nothing; values that do not fit
/// (non-finite scores, targets other than 0 and 1, class indices outside [0, C)) at compute(),
/// which throws the same kindling::UsageError on every rank, whichever rank stored them. A
/// value check at update() would make only the rank that saw the value throw while the other
/// ranks wait for it in compute()'s gather until the collective timeout.
///
/// \code
///   auto auc = std::make_shared<ROC_AUC>(OutputTransform(), ROC_AUC::Average::kWeighted);
///   auc->attach(evaluator, "roc_auc");
/// \endcode
///
/// Ranks: update() is local (its checks too: shapes only, see above). compute() is
/// EpochMetric's: one gather of every rank's samples (uneven or empty shards), the computation
/// (value checks included) on rank 0 and a broadcast of its result, so every rank returns rank
/// 0's value or throws what rank 0 throws. The warnings a computation logs (an average
/// precision without positives, ...) come from rank 0 only.

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
    /// scikit-learn's 'macro' (the default): the unweighted mean over classes, a number.
    kMacro,
    /// 'weighted': the mean weighted by each class's number of positives, a number (0 when
    /// no class has a positive).
    kWeighted,
    /// 'micro': one binary problem over every (sample, class) pair, a number.
    kMicro,
    /// None: the per-class (per-label) values, a (C,) float64 tensor.
    kNone,
  };

 protected:
  /// `binary_only`: refuse the (N, C) kinds (the curves). Throws kindling::UsageError for an
  /// empty compute_fn.
  RankingMetric(ComputeFunction compute_fn, bool binary_only, OutputTransform output_transform, bool check_compute_fn,
                c10::Device device);
  /// Throws kindling::UsageError naming the metric for a batch whose shapes or dtypes fit no
  /// kind the header above lists: complex tensors, shapes that do not pair, (N, C) input to a
  /// curve. Checks no value (see "Where misuse is reported" above: the compute functions do,
  /// on rank 0). Local.
  void check_input(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  bool binary_only_;
};

/// scikit-learn's spelling: "macro", "weighted", "micro", "None".
KINDLING_API const char* to_string(RankingMetric::Average average);

}  // namespace metrics
}  // namespace kindling
