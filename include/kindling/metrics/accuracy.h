#pragma once
/// \file
/// Accuracy (ignite's): the fraction of correct predictions over all ranks' samples.
/// binary: y_pred of 0/1 with y's shape, every element counts; multiclass: argmax over
/// y_pred's dimension 1 against y, every position counts; multilabel (is_multilabel): a
/// sample counts as correct only when all its labels match.

#include "kindling/metrics/classification.h"

namespace kindling {
namespace metrics {

class KINDLING_API Accuracy : public ClassificationMetric {
 public:
  explicit Accuracy(OutputTransform output_transform = {}, bool is_multilabel = false,
                    c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError for shapes or values that do not fit (see classification.h).
  void update(const Value& output) override;
  /// correct / examples over all ranks (a collective). Throws NotComputableError when no
  /// rank saw an example.
  Value compute() override;
  std::string name() const override { return "Accuracy"; }

 private:
  at::Tensor num_correct_;
  int64_t num_examples_ = 0;
};

}  // namespace metrics
}  // namespace kindling
