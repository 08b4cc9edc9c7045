#pragma once
/// \file
/// Agreement of predicted and true class labels over every sample: CohenKappa and
/// MatthewsCorrCoef (ignite's), and their functions of all labels.
///
/// \code
///   auto kappa = std::make_shared<kindling::metrics::CohenKappa>(
///       nullptr, kindling::metrics::CohenKappa::Weights::kQuadratic);
///   kappa->attach(evaluator, "qwk");                     // y_pred and y: class indices (N,)
///   auto mcc = std::make_shared<kindling::metrics::MatthewsCorrCoef>();
///   mcc->attach(evaluator, "mcc");                       // y_pred: scores (N, C) or labels (N,)
/// \endcode
///
/// Ranks: as EpochMetric (epoch_metric.h): update() stores this rank's labels (16 bytes a
/// sample; ignite's CohenKappa with num_classes keeps a running confusion matrix instead, the
/// same value); compute() gathers every rank's, computes on rank 0 in float64 and broadcasts
/// the value, a collective on every rank. Checkpointed with the labels and resharded to another
/// world size by concatenation.

#include <optional>
#include <string>

#include "kindling/metrics/epoch_metric.h"

namespace kindling {
namespace metrics {

/// The weights of Cohen's kappa for a disagreement between classes i and j: none (every
/// disagreement alike), |i - j| or (i - j)^2, divided by their largest.
enum class KappaWeights { kNone, kLinear, kQuadratic };

/// Cohen's kappa of class indices y_pred and y (the same length; rows of the confusion matrix
/// are y), with `weights` over `num_classes` classes (else 1 + the largest label seen), as
/// ignite 0.5.5 computes it: (p_o - p_e) / max(1 - p_e, 1e-9). Local. Throws
/// kindling::UsageError when the lengths differ or are 0, or a label is num_classes or more.
KINDLING_API double cohen_kappa(const at::Tensor& y_pred, const at::Tensor& y,
                                KappaWeights weights = KappaWeights::kNone,
                                std::optional<int64_t> num_classes = std::nullopt);

/// The Matthews correlation coefficient of labels y and y_pred (scikit-learn's
/// matthews_corrcoef, which ignite's matthews_corrcoef_compute_fn calls, after taking the argmax
/// of a 2-D y_pred, and of a 2-D y): over the labels present in either, 0 where it is undefined
/// (one class only predicted or true). Local. Throws kindling::UsageError for a 1-D y_pred with
/// a 2-D y, or lengths that differ or are 0.
KINDLING_API double matthews_corrcoef(const at::Tensor& y_pred, const at::Tensor& y);

/// Cohen's kappa over every rank's samples (cohen_kappa above).
class KINDLING_API CohenKappa : public EpochMetric {
 public:
  using Weights = KappaWeights;
  /// `num_classes`: the classes the weights range over (labels must be below it); without it,
  /// 1 + the largest label seen, as ignite. Throws kindling::UsageError for num_classes < 2.
  explicit CohenKappa(OutputTransform output_transform = {}, Weights weights = Weights::kNone,
                      bool check_compute_fn = false, c10::Device device = c10::Device(c10::kCPU),
                      std::optional<int64_t> num_classes = std::nullopt);
  /// A collective on every rank. Throws NotComputableError when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "CohenKappa"; }
  Weights weights() const { return weights_; }

 protected:
  /// Throws kindling::UsageError unless y_pred and y are (N,) or (N, 1) of whole, non-negative
  /// labels (below num_classes when given): ignite's "multilabel-indicator is not supported".
  void check_input(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  Weights weights_;
  std::optional<int64_t> num_classes_;
};

/// The Matthews correlation coefficient over every rank's samples (matthews_corrcoef above).
class KINDLING_API MatthewsCorrCoef : public EpochMetric {
 public:
  explicit MatthewsCorrCoef(OutputTransform output_transform = {}, bool check_compute_fn = false,
                            c10::Device device = c10::Device(c10::kCPU));
  /// A collective on every rank. Throws NotComputableError when no rank stored a sample.
  Value compute() override { return EpochMetric::compute(); }
  std::string name() const override { return "MatthewsCorrCoef"; }

 protected:
  /// Throws kindling::UsageError for a y_pred of labels (N,) with a y of one-hot rows (N, C).
  void check_input(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

}  // namespace metrics
}  // namespace kindling
