// MultiLabelConfusionMatrix (kindling/metrics/multilabel_confusion_matrix.h).
#include "kindling/metrics/multilabel_confusion_matrix.h"

#include <ATen/ATen.h>

#include <utility>

namespace kindling {
namespace metrics {

namespace {

// y_pred or y as ignite takes them: (N, C, ...), an integer dtype, values 0 and 1.
void check_binary_labels(const char* what, const at::Tensor& t, int64_t classes) {
  KINDLING_CHECK(t.dim() >= 2, "kindling::metrics::MultiLabelConfusionMatrix: ", what,
                 " must have shape (batch_size, num_classes (", classes, "), ...), but given ", t.sizes());
  KINDLING_CHECK(t.size(1) == classes, "kindling::metrics::MultiLabelConfusionMatrix: ", what, " has ", t.size(1),
                 " classes in dimension 1, expected num_classes = ", classes);
  KINDLING_CHECK(
      !at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type()) && t.scalar_type() != at::kBool,
      "kindling::metrics::MultiLabelConfusionMatrix: ", what,
      " must have an integer dtype (uint8, int8, int16, int32 or int64), but given ", t.scalar_type(),
      "; threshold scores first, e.g. (y_pred > 0.5).to(at::kLong)");
  KINDLING_CHECK(at::logical_or(t == 0, t == 1).all().item<bool>(),
                 "kindling::metrics::MultiLabelConfusionMatrix: ", what, " must hold 0 and 1 only (a binary tensor)");
}

}  // namespace

MultiLabelConfusionMatrix::MultiLabelConfusionMatrix(int64_t num_classes, OutputTransform output_transform,
                                                     c10::Device device, bool normalized)
    : Metric(std::move(output_transform), device), num_classes_(num_classes), normalized_(normalized) {
  KINDLING_CHECK(num_classes > 1, "kindling::metrics::MultiLabelConfusionMatrix: num_classes must be > 1, got ",
                 num_classes);
  register_state("confusion_matrix", &matrix_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  MultiLabelConfusionMatrix::reset();
}

void MultiLabelConfusionMatrix::reset() {
  matrix_ = at::zeros({num_classes_, 2, 2}, at::TensorOptions().dtype(at::kLong).device(device()));
  num_examples_ = 0;
}

void MultiLabelConfusionMatrix::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  y_pred = y_pred.detach();
  y = y.detach();
  check_binary_labels("y_pred", y_pred, num_classes_);
  check_binary_labels("y", y, num_classes_);
  KINDLING_CHECK(y_pred.sizes() == y.sizes(),
                 "kindling::metrics::MultiLabelConfusionMatrix: y_pred and y must have "
                 "the same shape, but given ",
                 y_pred.sizes(), " and ", y.sizes());
  // Per class: every sample and position of that class (dimension 1 first).
  const at::Tensor target = y.transpose(0, 1).reshape({num_classes_, -1}).to(device(), at::kLong);
  const at::Tensor pred = y_pred.transpose(0, 1).reshape({num_classes_, -1}).to(device(), at::kLong);
  const at::Tensor tp = (target * pred).sum(1);
  const at::Tensor fp = pred.sum(1) - tp;
  const at::Tensor fn = target.sum(1) - tp;
  const at::Tensor tn = target.size(1) - tp - fp - fn;
  matrix_ += at::stack({tn, fp, fn, tp}, 1).reshape({num_classes_, 2, 2});
  num_examples_ += y.size(0);
}

Value MultiLabelConfusionMatrix::compute() {
  const at::Tensor matrix = reduce(matrix_);
  if (reduce(num_examples_) == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::MultiLabelConfusionMatrix must have at least one example before it "
                             "can be computed");
  }
  if (!normalized_) return Value(matrix);
  const at::Tensor counts = matrix.to(at::kDouble);
  return Value(counts / counts.sum({1, 2}).reshape({-1, 1, 1}));
}

}  // namespace metrics
}  // namespace kindling
