#pragma once
/// \file
/// ROC_AUC and RocCurve (ignite's, which call scikit-learn's roc_auc_score and roc_curve;
/// kindling computes the same values itself, exactly, in float64). Inputs: see ranking.h.
///
/// ROC AUC is the area under the curve of the true positive rate against the false positive
/// rate over every distinct score threshold, by the trapezoid rule, starting at (0, 0): a
/// positive and a negative with the same score count half (as scikit-learn; equal to the
/// Mann-Whitney statistic). It is undefined when y holds one class only (for a class of
/// multiclass or multilabel input: no positive or no negative for it).
///
/// \code
///   auto auc = std::make_shared<ROC_AUC>([](const Value& o) {     // binary, from logits
///     return Value{at::sigmoid(o[0]), o[1]};
///   });
///   auc->attach(evaluator, "roc_auc");                    // a number
///   auto roc = std::make_shared<RocCurve>();
///   roc->attach(evaluator, "roc");                        // (fpr, tpr, thresholds)
///   evaluator.run(loader);
///   at::Tensor fpr = evaluator.state().metrics.at("roc")[0];
/// \endcode
///
/// Ranks: as every ranking metric (ranking.h): update() is local and checks shapes only;
/// compute() gathers every rank's samples, checks their values and computes on rank 0 and
/// broadcasts the value or the error, a collective on every rank.

#include <string>

#include "kindling/metrics/ranking.h"

namespace kindling {
namespace metrics {

/// Area under the ROC curve (ignite's ROC_AUC; scikit-learn's roc_auc_score, with
/// multi_class='ovr' for multiclass input).
class KINDLING_API ROC_AUC : public RankingMetric {
 public:
  /// `average` combines the classes of multiclass and multilabel input (see
  /// RankingMetric::Average); with `check_compute_fn` (ignite's, default false) the first
  /// batch after each reset is tried and a failure logged as a warning.
  explicit ROC_AUC(OutputTransform output_transform = {}, Average average = Average::kMacro,
                   bool check_compute_fn = false, c10::Device device = c10::Device(c10::kCPU));
  /// How the classes are combined, as given to the constructor. Local; does not throw.
  Average average() const { return average_; }
  /// The AUC over all ranks' samples: a number, or a (C,) float64 tensor for Average::kNone
  /// with multiclass or multilabel input. A collective on every rank. Throws
  /// NotComputableError when no rank stored a sample, or when y holds one class only
  /// (binary), or a class has no positive or no negative sample (the message names the
  /// class; scikit-learn 1.9.1, and so ignite, returns nan there with an
  /// UndefinedMetricWarning: kindling refuses instead, docs/coming-from-ignite.md);
  /// kindling::UsageError, on every rank, when
  /// a rank stored values that do not fit (a non-finite score, a target other than 0 and 1,
  /// a class index outside [0, C): see ranking.h); reset() before the next computation.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "ROC_AUC"; }

 private:
  Average average_;
};

/// The ROC curve of binary input (ignite's RocCurve; scikit-learn's roc_curve with
/// drop_intermediate=False, which ignite leaves at True: see compute()).
class KINDLING_API RocCurve : public RankingMetric {
 public:
  /// Binary input only: for multiclass scores, pick one class's column (and y == class) with
  /// output_transform. `check_compute_fn` as ROC_AUC's.
  explicit RocCurve(OutputTransform output_transform = {}, bool check_compute_fn = false,
                    c10::Device device = c10::Device(c10::kCPU));
  /// The tuple (fpr, tpr, thresholds) of float64 (T + 1,) tensors over the T distinct scores:
  /// thresholds[0] is +infinity (no sample predicted positive: fpr = tpr = 0, as
  /// scikit-learn >= 1.3), then the distinct scores in decreasing order; fpr[i] and tpr[i] are
  /// the rates of the samples with score >= thresholds[i]. Every threshold is kept (ignite's
  /// RocCurve drops those whose point is collinear with its neighbours; the area is the
  /// same). When y has no negative (no positive), fpr (tpr) is NaN and a warning is logged,
  /// as scikit-learn does. A collective on every rank; throws NotComputableError when no
  /// rank stored a sample, and kindling::UsageError on every rank when a rank stored values
  /// that do not fit (see ranking.h).
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "RocCurve"; }
};

/// ignite's roc_auc_compute_fn (scikit-learn's roc_auc_score with its defaults): the area
/// under the ROC curve of these samples, computed as ROC_AUC computes it (Average::kMacro), in
/// this process only: for a kindling::metrics::EpochMetric of your own
/// (`std::make_shared<EpochMetric>(roc_auc_compute_fn)`) or on its own. Binary input gives a
/// number, as ignite's; (N, C) multiclass scores are taken one-vs-rest (where scikit-learn
/// refuses them unless told multi_class='ovr'). Local (no communication). Throws
/// NotComputableError when y holds one class only (or a class has no positive or no negative
/// sample), kindling::UsageError for inputs that fit no kind of ranking.h or hold values that
/// do not fit (a non-finite score, a target other than 0 and 1, a class index outside [0, C)).
KINDLING_API Value roc_auc_compute_fn(const at::Tensor& y_preds, const at::Tensor& y_targets);

/// ignite's roc_auc_curve_compute_fn (scikit-learn's roc_curve with its defaults, so
/// drop_intermediate=True): the tuple (fpr, tpr, thresholds) of float64 tensors of binary
/// input, as RocCurve::compute() gives it but without the thresholds whose point lies on the
/// straight line between its neighbours' (the first and the last are kept; the area is the
/// same). This is what ignite's RocCurve returns. Local; throws as RocCurve::compute() does
/// (kindling::UsageError for (N, C) input or values that do not fit; fpr or tpr NaN with a
/// warning when y has no negative or no positive).
KINDLING_API Value roc_auc_curve_compute_fn(const at::Tensor& y_preds, const at::Tensor& y_targets);

}  // namespace metrics
}  // namespace kindling
