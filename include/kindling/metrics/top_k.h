#pragma once
/// \file
/// TopKCategoricalAccuracy (ignite's): the fraction of samples whose target is among the k
/// highest scores of y_pred (N, C) (y: (N,) class indices), over all ranks' samples.
///
/// \code
///   auto top5 = std::make_shared<TopKCategoricalAccuracy>(5);
///   top5->attach(evaluator, "top5");
/// \endcode

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API TopKCategoricalAccuracy : public Metric {
 public:
  /// Throws kindling::UsageError for k < 1.
  explicit TopKCategoricalAccuracy(int64_t k = 5, OutputTransform output_transform = {},
                                   c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError unless y_pred is 2-D (N, C) with C >= k and y is 1-D of N.
  void update(const Value& output) override;
  /// correct / samples over all ranks (a collective). Throws NotComputableError when no
  /// rank saw a sample.
  Value compute() override;
  std::string name() const override { return "TopKCategoricalAccuracy"; }
  int64_t k() const { return k_; }

 private:
  int64_t k_;
  at::Tensor num_correct_;
  int64_t num_examples_ = 0;
};

}  // namespace metrics
}  // namespace kindling
