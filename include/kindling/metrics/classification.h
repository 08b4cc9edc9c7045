#pragma once
/// \file
/// The input checks and type inference shared by Accuracy, Precision and Recall (ignite's
/// _BaseClassification): y_pred (N, C, ...) with y (N, ...) is multiclass (C > 1) or binary
/// (C == 1); y_pred and y of the same shape are binary, or multilabel when asked. Binary and
/// multilabel values must be 0 or 1 (thresholded predictions). The type is inferred again
/// after every reset(). Local: nothing here communicates.

#include <string>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// The kind of classification input seen since the last reset().
enum class InputType { kUnknown, kBinary, kMulticlass, kMultilabel };
KINDLING_API const char* to_string(InputType type);

class KINDLING_API ClassificationMetric : public Metric {
 public:
  ClassificationMetric(OutputTransform output_transform, bool is_multilabel, c10::Device device);
  bool is_multilabel() const { return is_multilabel_; }
  InputType input_type() const { return type_; }
  int64_t num_classes() const { return num_classes_; }

 protected:
  /// Clears the inferred type (call from reset()).
  void reset_type();
  /// Checks shapes and values and infers (or re-checks) the type. Throws
  /// kindling::UsageError with ignite's messages.
  void check(const at::Tensor& y_pred, const at::Tensor& y);

 private:
  bool is_multilabel_;
  InputType type_ = InputType::kUnknown;
  int64_t num_classes_ = 0;
};

}  // namespace metrics
}  // namespace kindling
