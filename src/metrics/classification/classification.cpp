// Input checks and type inference for classification metrics (ignite's _BaseClassification).
#include "kindling/metrics/classification.h"

#include <ATen/ATen.h>

#include <sstream>

#include "metrics/shape_text.h"

namespace kindling {
namespace metrics {

const char* to_string(InputType type) {
  switch (type) {
    case InputType::kUnknown: return "unknown";
    case InputType::kBinary: return "binary";
    case InputType::kMulticlass: return "multiclass";
    case InputType::kMultilabel: return "multilabel";
  }
  return "?";
}

ClassificationMetric::ClassificationMetric(OutputTransform output_transform, bool is_multilabel, c10::Device device)
    : Metric(std::move(output_transform), device), is_multilabel_(is_multilabel) {
  // The inferred input type: a resumed metric keeps checking later batches against it.
  register_state(
      "_type", [this]() { return c10::IValue(static_cast<int64_t>(type_)); },
      [](const c10::IValue& v) {
        return v.isInt() && v.toInt() >= 0 && v.toInt() <= static_cast<int64_t>(InputType::kMultilabel)
                   ? std::string()
                   : "an input type code (0-3)";
      },
      [this](const c10::IValue& v) { type_ = static_cast<InputType>(v.toInt()); }, Reshard::kReplicated);
  register_state("_num_classes", &num_classes_, Reshard::kReplicated);
}

void ClassificationMetric::reset_type() {
  type_ = InputType::kUnknown;
  num_classes_ = 0;
}

namespace {

bool zeros_and_ones(const at::Tensor& t) { return at::equal(t, t * t); }

}  // namespace

void ClassificationMetric::check(const at::Tensor& y_pred, const at::Tensor& y) {
  const std::string who = "kindling::metrics::" + name();
  KINDLING_CHECK(y.dim() == y_pred.dim() || y.dim() + 1 == y_pred.dim(), who,
                 ": y must have shape of (batch_size, ...) and y_pred must have shape of (batch_size, "
                 "num_categories, ...) or (batch_size, ...), but given ",
                 shape_text(y), " vs ", shape_text(y_pred));
  if (y.dim() + 1 == y_pred.dim()) {
    std::vector<int64_t> dropped = y_pred.sizes().vec();
    dropped.erase(dropped.begin() + 1);
    KINDLING_CHECK(at::IntArrayRef(dropped) == y.sizes(), who, ": y and y_pred must have compatible shapes, got ",
                   shape_text(y), " vs ", shape_text(y_pred));
  }
  if (is_multilabel_) {
    KINDLING_CHECK(y.sizes() == y_pred.sizes() && y.dim() > 1 && y.size(1) > 1, who,
                   ": y and y_pred must have same shape of (batch_size, num_categories, ...) and num_categories > 1, "
                   "got ",
                   shape_text(y), " vs ", shape_text(y_pred));
  }
  InputType type;
  int64_t classes;
  auto check_binary = [&] {
    KINDLING_CHECK(zeros_and_ones(y), who, ": for binary cases, y must be comprised of 0's and 1's");
    KINDLING_CHECK(zeros_and_ones(y_pred), who,
                   ": for binary cases, y_pred must be comprised of 0's and 1's "
                   "(threshold the predictions in an output_transform)");
  };
  if (y.dim() + 1 == y_pred.dim()) {
    if (y_pred.size(1) == 1) {
      type = InputType::kBinary;
      classes = 1;
      check_binary();
    } else {
      type = InputType::kMulticlass;
      classes = y_pred.size(1);
    }
  } else {
    check_binary();
    type = is_multilabel_ ? InputType::kMultilabel : InputType::kBinary;
    classes = is_multilabel_ ? y_pred.size(1) : 1;
  }
  if (type_ == InputType::kUnknown) {
    type_ = type;
    num_classes_ = classes;
    return;
  }
  KINDLING_CHECK(type_ == type, who, ": input data type has changed from ", to_string(type_), " to ", to_string(type));
  KINDLING_CHECK(num_classes_ == classes, who, ": input data number of classes has changed from ", num_classes_, " to ",
                 classes);
}

}  // namespace metrics
}  // namespace kindling
