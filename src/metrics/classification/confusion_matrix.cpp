// ConfusionMatrix: int64 counts (rows targets, columns predictions) summed over ranks at
// compute, and the MetricsLambdas derived from it.
#include "kindling/metrics/confusion_matrix.h"

#include <ATen/ATen.h>

#include <sstream>

#include "metrics/shape_text.h"

namespace kindling {
namespace metrics {

ConfusionMatrix::ConfusionMatrix(int64_t num_classes, std::optional<std::string> average,
                                 OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device), num_classes_(num_classes), average_(std::move(average)) {
  KINDLING_CHECK(!average_ || *average_ == "samples" || *average_ == "recall" || *average_ == "precision",
                 "kindling::metrics::ConfusionMatrix: argument average can be std::nullopt or one of 'samples', "
                 "'recall', 'precision', but given '",
                 average_.value_or(""), "'");
  KINDLING_CHECK(num_classes > 1,
                 "kindling::metrics::ConfusionMatrix: argument num_classes needs to be > 1, but "
                 "given ",
                 num_classes);
  register_state("confusion_matrix", &matrix_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  reset();
}

void ConfusionMatrix::reset() {
  matrix_ = at::zeros({num_classes_, num_classes_}, at::TensorOptions().dtype(at::kLong).device(device()));
  num_examples_ = 0;
}

void ConfusionMatrix::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  y_pred = y_pred.detach();
  y = y.detach();
  const int64_t c = num_classes_;
  const char* who = "kindling::metrics::ConfusionMatrix";
  KINDLING_CHECK(y_pred.dim() >= 2, who, ": y_pred must have shape (batch_size, num_classes (currently set to ", c,
                 "), ...), but given ", shape_text(y_pred));
  KINDLING_CHECK(y_pred.size(1) == c, who, ": y_pred does not have correct number of classes: ", y_pred.size(1), " vs ",
                 c);
  KINDLING_CHECK(y.dim() + 1 == y_pred.dim(), who,
                 ": y_pred must have shape (batch_size, num_classes (currently "
                 "set to ",
                 c, "), ...) and y must have shape of (batch_size, ...), but given ", shape_text(y), " vs ", shape_text(y_pred));
  std::vector<int64_t> dropped = y_pred.sizes().vec();
  dropped.erase(dropped.begin() + 1);
  KINDLING_CHECK(at::IntArrayRef(dropped) == y.sizes(), who, ": y and y_pred must have compatible shapes, got ",
                 shape_text(y), " vs ", shape_text(y_pred));
  KINDLING_CHECK(at::isIntegralType(y.scalar_type(), /*includeBool=*/false), who,
                 ": y must hold integer class indices, but its dtype is ", y.scalar_type(), "; convert it to long");

  num_examples_ += y_pred.size(0);
  const at::Tensor p = at::argmax(y_pred, 1).flatten();
  const at::Tensor t = y.flatten().to(p.device()).to(at::kLong);
  const at::Tensor keep = (t >= 0) & (t < c);  // drops "ignore" labels such as 255
  const at::Tensor index = t.masked_select(keep) * c + p.masked_select(keep);
  const at::Tensor counts = at::bincount(index, {}, c * c).reshape({c, c});
  // Out of place: a matrix returned by compute() (the state itself in a 1-rank run) stays as it was.
  matrix_ = matrix_ + counts.to(matrix_.device());
}

Value ConfusionMatrix::compute() {
  const at::Tensor cm = reduce(matrix_);
  const int64_t examples = reduce(num_examples_);
  if (examples == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::ConfusionMatrix must have at least one "
                             "example before it can be computed");
  }
  if (!average_) return cm;
  const at::Tensor m = cm.to(at::kFloat);
  if (*average_ == "samples") return m / static_cast<double>(examples);
  if (*average_ == "recall") return m / (m.sum(1, /*keepdim=*/true) + 1e-15);
  return m / (m.sum(0) + 1e-15);
}

namespace {

void check_cm(const std::shared_ptr<ConfusionMatrix>& cm, const char* who) {
  KINDLING_CHECK(cm != nullptr, "kindling::metrics::", who,
                 ": argument cm is null; pass the ConfusionMatrix to "
                 "derive from");
}

void check_ignore_index(const ConfusionMatrix& cm, const std::optional<int64_t>& ignore_index, const char* who) {
  KINDLING_CHECK(!ignore_index || (*ignore_index >= 0 && *ignore_index < cm.num_classes()), "kindling::metrics::", who,
                 ": ignore_index should be in the range of [0, ", cm.num_classes(), "), but given ",
                 ignore_index.value_or(-1));
}

// The vector without element `ignore_index` (order kept).
at::Tensor drop(const at::Tensor& v, const std::optional<int64_t>& ignore_index, const char* what) {
  if (!ignore_index) return v;
  const int64_t i = *ignore_index;
  KINDLING_CHECK(i < v.size(0), "kindling::metrics: ignore_index ", i, " is larger than the length of ", what,
                 " vector ", v.size(0));
  return at::cat({v.narrow(0, 0, i), v.narrow(0, i + 1, v.size(0) - i - 1)});
}

at::Tensor as_double(const Value& v) { return v.tensor().to(at::kDouble); }

std::shared_ptr<MetricsLambda> over(std::shared_ptr<ConfusionMatrix> cm, MetricsLambda::Function f) {
  return std::make_shared<MetricsLambda>(std::move(f), std::vector<std::shared_ptr<Metric>>{std::move(cm)});
}

Value mean_or_vector(const at::Tensor& v, bool average) {
  if (average) return v.mean().item<double>();
  return v;
}

}  // namespace

std::shared_ptr<MetricsLambda> IoU(std::shared_ptr<ConfusionMatrix> cm, std::optional<int64_t> ignore_index) {
  check_cm(cm, "IoU");
  KINDLING_CHECK(!cm->average() || *cm->average() == "samples",
                 "kindling::metrics::IoU: ConfusionMatrix should have "
                 "average attribute either std::nullopt or 'samples', but it has '",
                 cm->average().value_or(""), "'");
  check_ignore_index(*cm, ignore_index, "IoU");
  return over(std::move(cm), [ignore_index](const std::vector<Value>& v) -> Value {
    const at::Tensor m = as_double(v[0]);
    const at::Tensor diag = m.diagonal();
    return drop(diag / (m.sum(1) + m.sum(0) - diag + 1e-15), ignore_index, "IoU");
  });
}

std::shared_ptr<MetricsLambda> JaccardIndex(std::shared_ptr<ConfusionMatrix> cm, std::optional<int64_t> ignore_index) {
  return IoU(std::move(cm), ignore_index);
}

std::shared_ptr<MetricsLambda> mIoU(std::shared_ptr<ConfusionMatrix> cm, std::optional<int64_t> ignore_index) {
  std::shared_ptr<MetricsLambda> iou = IoU(std::move(cm), ignore_index);
  return std::make_shared<MetricsLambda>(
      [](const std::vector<Value>& v) -> Value { return v[0].tensor().mean().item<double>(); },
      std::vector<std::shared_ptr<Metric>>{iou});
}

std::shared_ptr<MetricsLambda> DiceCoefficient(std::shared_ptr<ConfusionMatrix> cm,
                                               std::optional<int64_t> ignore_index) {
  check_cm(cm, "DiceCoefficient");
  check_ignore_index(*cm, ignore_index, "DiceCoefficient");
  return over(std::move(cm), [ignore_index](const std::vector<Value>& v) -> Value {
    const at::Tensor m = as_double(v[0]);
    return drop(2.0 * m.diagonal() / (m.sum(1) + m.sum(0) + 1e-15), ignore_index, "Dice");
  });
}

std::shared_ptr<MetricsLambda> cm_accuracy(std::shared_ptr<ConfusionMatrix> cm) {
  check_cm(cm, "cm_accuracy");
  return over(std::move(cm), [](const std::vector<Value>& v) -> Value {
    const at::Tensor m = as_double(v[0]);
    return (m.diagonal().sum() / (m.sum() + 1e-15)).item<double>();
  });
}

std::shared_ptr<MetricsLambda> cm_precision(std::shared_ptr<ConfusionMatrix> cm, bool average) {
  check_cm(cm, "cm_precision");
  return over(std::move(cm), [average](const std::vector<Value>& v) -> Value {
    const at::Tensor m = as_double(v[0]);
    return mean_or_vector(m.diagonal() / (m.sum(0) + 1e-15), average);
  });
}

std::shared_ptr<MetricsLambda> cm_recall(std::shared_ptr<ConfusionMatrix> cm, bool average) {
  check_cm(cm, "cm_recall");
  return over(std::move(cm), [average](const std::vector<Value>& v) -> Value {
    const at::Tensor m = as_double(v[0]);
    return mean_or_vector(m.diagonal() / (m.sum(1) + 1e-15), average);
  });
}

}  // namespace metrics
}  // namespace kindling
