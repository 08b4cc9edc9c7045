#pragma once
/// \file
/// Fairness across subgroups (ignite.metrics.fairness): a metric computed per group of the
/// samples (SubgroupMetric), its largest gap between groups (SubgroupDifference), and the
/// ready-made SubgroupAccuracyDifference and DemographicParityDifference over SelectionRate
/// (the share of samples predicted as each class). Input: (y_pred, y, group_labels), a tuple
/// of three tensors or the names "y_pred", "y", "group_labels"; group_labels (N,) integers.
///
/// \code
///   auto gap = std::make_shared<kindling::metrics::SubgroupAccuracyDifference>(std::vector<int64_t>{0, 1});
///   gap->attach(evaluator, "accuracy_gap");   // output: (logits, labels, group of each sample)
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order): each group's metric reduces across ranks as it does alone. Checkpointed (each
/// group's state under "_metrics/<group>/") and resharded as the group metric is.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/classification.h"
#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// One metric per group, updated with that group's rows of each batch.
class KINDLING_API SubgroupMetric : public Metric {
 public:
  /// Makes the metric of one group (ignite deep-copies a base metric; C++ asks for a factory).
  using Factory = std::function<std::shared_ptr<Metric>()>;
  /// `groups`: the group ids (unique). Throws kindling::UsageError when `make` is empty,
  /// `groups` is empty or holds an id twice.
  SubgroupMetric(Factory make, std::vector<int64_t> groups, OutputTransform output_transform = {},
                 c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError when the output is not (y_pred, y, group_labels) with as many
  /// rows each (nothing is stored then); a group's metric that refuses its rows throws its
  /// error, and the groups updated before it keep this batch.
  void update(const Value& output) override;
  /// {"<group>": value} of every group whose metric could compute (a group that saw no sample
  /// on any rank is left out, as ignite). A collective. Throws kindling::UsageError when a
  /// group's value is not a number or a tensor.
  Value compute() override;
  std::string name() const override { return "SubgroupMetric"; }

 protected:
  /// Each group's value that could be computed, in the order of `groups` (a collective).
  std::vector<std::pair<int64_t, at::Tensor>> group_values();

 private:
  std::vector<int64_t> groups_;
  std::vector<std::shared_ptr<Metric>> metrics_;
};

/// The largest gap between groups: max - min over the groups' values (elementwise for tensor
/// values, then the largest), as a number.
class KINDLING_API SubgroupDifference : public SubgroupMetric {
 public:
  using SubgroupMetric::SubgroupMetric;
  /// A collective. Throws NotComputableError when fewer than two groups could compute.
  Value compute() override;
  std::string name() const override { return "SubgroupDifference"; }
};

/// The largest gap in Accuracy (kindling/metrics/accuracy.h) between groups.
class KINDLING_API SubgroupAccuracyDifference : public SubgroupDifference {
 public:
  explicit SubgroupAccuracyDifference(std::vector<int64_t> groups, bool is_multilabel = false,
                                      OutputTransform output_transform = {},
                                      c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "SubgroupAccuracyDifference"; }
};

/// The share of samples predicted as each class: binary predictions (0/1) give the shares of 0
/// and of 1; multiclass (logits (N, C)) the shares of each argmax; multilabel (N, C, ...) the
/// share of positives per label. A float64 tensor.
class KINDLING_API SelectionRate : public ClassificationMetric {
 public:
  explicit SelectionRate(OutputTransform output_transform = {}, bool is_multilabel = false,
                         c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError for input Accuracy would refuse, or another number of classes
  /// than the earlier batches.
  void update(const Value& output) override;
  /// Over every rank's samples (a collective). Throws NotComputableError when no rank saw a sample.
  Value compute() override;
  std::string name() const override { return "SelectionRate"; }

 private:
  at::Tensor positives_;  // float64, (classes,) once a batch was seen, else a 0-dim 0
  int64_t num_examples_ = 0;
};

/// The largest gap in SelectionRate between groups (demographic parity).
class KINDLING_API DemographicParityDifference : public SubgroupDifference {
 public:
  explicit DemographicParityDifference(std::vector<int64_t> groups, bool is_multilabel = false,
                                       OutputTransform output_transform = {},
                                       c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "DemographicParityDifference"; }
};

}  // namespace metrics
}  // namespace kindling
