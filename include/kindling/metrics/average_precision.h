#pragma once
/// \file
/// AveragePrecision and PrecisionRecallCurve (ignite's, which call scikit-learn's
/// average_precision_score and precision_recall_curve; kindling computes the same values
/// itself, exactly, in float64). Inputs: see ranking.h.
///
/// At each distinct score threshold t (highest first), precision P = positives with score
/// >= t / samples with score >= t and recall R = positives with score >= t / all positives.
/// Average precision is scikit-learn's uninterpolated step sum, AP = sum over thresholds of
/// (R_n - R_{n-1}) * P_n: tied scores enter together, at the precision of the whole tie.
/// Without any positive, AP is 0 and a warning is logged (as scikit-learn).
///
/// \code
///   auto ap = std::make_shared<AveragePrecision>();      // macro over classes by default
///   ap->attach(evaluator, "ap");                          // a number
///   auto pr = std::make_shared<PrecisionRecallCurve>();   // binary input
///   pr->attach(evaluator, "pr");                          // (precision, recall, thresholds)
/// \endcode
///
/// Ranks: as every ranking metric (ranking.h): update() is local and checks shapes only;
/// compute() gathers every rank's samples, checks their values and computes on rank 0 and
/// broadcasts the value or the error, a collective on every rank.

#include <string>

#include "kindling/metrics/ranking.h"

namespace kindling {
namespace metrics {

/// Average precision (ignite's AveragePrecision; scikit-learn's average_precision_score).
class KINDLING_API AveragePrecision : public RankingMetric {
 public:
  /// `average` combines the classes of multiclass and multilabel input (see
  /// RankingMetric::Average; kWeighted weighs by positives, so classes without any count
  /// for nothing); `check_compute_fn` as ROC_AUC's.
  explicit AveragePrecision(OutputTransform output_transform = {}, Average average = Average::kMacro,
                            bool check_compute_fn = false, c10::Device device = c10::Device(c10::kCPU));
  /// How the classes are combined, as given to the constructor. Local; does not throw.
  Average average() const { return average_; }
  /// The AP over all ranks' samples: a number, or a (C,) float64 tensor for Average::kNone
  /// with multiclass or multilabel input. A class (or binary input) without any positive
  /// sample has AP 0, and one warning per compute names those classes (scikit-learn warns
  /// too). A collective on every rank. Throws NotComputableError when no rank stored a
  /// sample; kindling::UsageError, on every rank, when a rank stored values that do not fit
  /// (a non-finite score, a target other than 0 and 1, a class index outside [0, C): see
  /// ranking.h); reset() before the next computation.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "AveragePrecision"; }

 private:
  Average average_;
};

/// The precision-recall curve of binary input (ignite's PrecisionRecallCurve;
/// scikit-learn's precision_recall_curve, with the rule of scikit-learn >= 1.1).
class KINDLING_API PrecisionRecallCurve : public RankingMetric {
 public:
  /// Binary input only: for multiclass scores, pick one class's column (and y == class) with
  /// output_transform. `check_compute_fn` as ROC_AUC's.
  explicit PrecisionRecallCurve(OutputTransform output_transform = {}, bool check_compute_fn = false,
                                c10::Device device = c10::Device(c10::kCPU));
  /// The tuple (precision, recall, thresholds) of float64 tensors, (T + 1,), (T + 1,) and
  /// (T,) over the T distinct scores: thresholds increase; precision[i] and recall[i] are
  /// those of the samples with score >= thresholds[i]; the curve covers every distinct
  /// score, so it starts at recall 1 with the class balance as precision (scikit-learn >= 1.1;
  /// earlier versions stopped at the first threshold of full recall); a last point
  /// precision 1, recall 0 without threshold ends it. Without any positive, recall is 1 at
  /// every threshold and a warning is logged (as scikit-learn). A collective on every rank;
  /// throws NotComputableError when no rank stored a sample, and kindling::UsageError on
  /// every rank when a rank stored values that do not fit (see ranking.h).
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "PrecisionRecallCurve"; }
};

/// ignite's average_precision_compute_fn (scikit-learn's average_precision_score with its
/// defaults): the average precision of these samples, computed as AveragePrecision computes it
/// (Average::kMacro), in this process only: for a kindling::metrics::EpochMetric of your own or
/// on its own. A number for binary input. Local (no communication). Throws
/// kindling::UsageError for inputs that fit no kind of ranking.h or hold values that do not
/// fit; without any positive, 0 and a warning (as scikit-learn).
KINDLING_API Value average_precision_compute_fn(const at::Tensor& y_preds, const at::Tensor& y_targets);

/// ignite's precision_recall_curve_compute_fn (scikit-learn's precision_recall_curve with its
/// defaults): the tuple (precision, recall, thresholds) of binary input, exactly as
/// PrecisionRecallCurve::compute() gives it, in this process only. Local; throws as that
/// compute() does.
KINDLING_API Value precision_recall_curve_compute_fn(const at::Tensor& y_preds, const at::Tensor& y_targets);

}  // namespace metrics
}  // namespace kindling
