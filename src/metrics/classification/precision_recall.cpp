// Precision and Recall: per-class (or micro, or per-sample) numerator and denominator
// accumulators, and the support for 'weighted', summed over ranks at compute.
#include "kindling/metrics/precision_recall.h"

#include <ATen/ATen.h>

#include <limits>

#include "kindling/log.h"

namespace kindling {
namespace metrics {

namespace {
constexpr double kEps = 1e-20;
}  // namespace

const char* to_string(PrecisionRecallBase::Average average) {
  using A = PrecisionRecallBase::Average;  // kindling::metrics::Average is the Average metric
  switch (average) {
    case A::kNone: return "None";
    case A::kFalse: return "False";
    case A::kMacro: return "macro";
    case A::kMicro: return "micro";
    case A::kWeighted: return "weighted";
    case A::kSamples: return "samples";
  }
  return "?";
}

PrecisionRecallBase::PrecisionRecallBase(OutputTransform output_transform, Average average, bool is_multilabel,
                                         c10::Device device, bool precision)
    : ClassificationMetric(std::move(output_transform), is_multilabel, device),
      average_(average),
      precision_(precision) {
  register_state("_numerator", &numerator_, Reshard::kSum);
  register_state("_denominator", &denominator_, Reshard::kSum);
  register_state("_weight", &weight_, Reshard::kSum);
  register_state("_width", &width_, Reshard::kReplicated);
  reset();
}

Precision::Precision(OutputTransform output_transform, Average average, bool is_multilabel, c10::Device device)
    : PrecisionRecallBase(std::move(output_transform), average, is_multilabel, device, true) {}

Recall::Recall(OutputTransform output_transform, Average average, bool is_multilabel, c10::Device device)
    : PrecisionRecallBase(std::move(output_transform), average, is_multilabel, device, false) {}

void PrecisionRecallBase::reset() {
  reset_type();
  numerator_ = at::Tensor();
  denominator_ = at::Tensor();
  weight_ = at::Tensor();
  width_ = 0;
}

namespace {

// ignite's dtype warnings, once per metric.
void warn_about_dtypes(const std::string& who, InputType type, PrecisionRecallBase::Average average,
                       const at::Tensor& y_pred, const at::Tensor& y, bool& warned) {
  if (warned) return;
  if (type == InputType::kMulticlass && y.scalar_type() != at::kLong) {
    warned = true;
    kindling::log(LogLevel::kWarning, who + ": `y` should be of dtype long when entry type is multiclass");
  } else if (type == InputType::kBinary && average != PrecisionRecallBase::Average::kFalse &&
             (y.scalar_type() != at::kLong || y_pred.scalar_type() != at::kLong)) {
    warned = true;
    kindling::log(LogLevel::kWarning, who +
                                          ": `y` and `y_pred` should be of dtype long when entry type is "
                                          "binary and average is not Average::kFalse");
  }
}

// ignite's _prepare_output: 2-D (M, K) indicator matrices, or 1-D for binary + kFalse; the
// predictions first.
std::pair<at::Tensor, at::Tensor> indicators(const std::string& who, InputType type,
                                             PrecisionRecallBase::Average average, const at::Tensor& y_pred,
                                             const at::Tensor& y) {
  if (type == InputType::kMultilabel) {
    const int64_t c = y_pred.size(1);
    return {at::movedim(y_pred, 1, -1).reshape({-1, c}), at::movedim(y, 1, -1).reshape({-1, c})};
  }
  const int64_t k = type == InputType::kBinary ? 2 : y_pred.size(1);
  at::Tensor t = y.reshape({-1});
  if (type == InputType::kMulticlass && t.numel() > 0) {
    const int64_t max = t.max().item<int64_t>();
    KINDLING_CHECK(max + 1 <= k, who,
                   ": y_pred contains fewer classes than y. Number of classes in the "
                   "prediction is ",
                   k, " and an element in y has invalid class = ", max + 1, "; y must hold class indices in [0, ", k,
                   ")");
    const int64_t min = t.min().item<int64_t>();
    KINDLING_CHECK(min >= 0, who, ": y holds the negative class ", min, "; y must hold class indices in [0, ", k, ")");
  }
  if (type == InputType::kBinary && average == PrecisionRecallBase::Average::kFalse) return {y_pred.reshape({-1}), t};
  at::Tensor p =
      type == InputType::kMulticlass ? at::argmax(y_pred, 1).reshape({-1}) : y_pred.to(at::kLong).reshape({-1});
  return {at::one_hot(p, k), at::one_hot(t.to(at::kLong), k)};
}

}  // namespace

void PrecisionRecallBase::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  y_pred = y_pred.detach();
  y = y.detach();
  check(y_pred, y);
  const std::string who = "kindling::metrics::" + name();
  const InputType type = input_type();
  KINDLING_CHECK(!(average_ == Average::kSamples && (type == InputType::kBinary || type == InputType::kMulticlass)),
                 who,
                 ": argument average='samples' is incompatible with binary and multiclass input data; use it "
                 "with is_multilabel=true, or choose another average");
  warn_about_dtypes(who, type, average_, y_pred, y, warned_);
  auto [p, t] = indicators(who, type, average_, y_pred, y);
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device());
  p = p.to(options);
  t = t.to(options);
  const at::Tensor correct = t * p;
  const at::Tensor& positives = precision_ ? p : t;

  at::Tensor num, den, weight;
  switch (average_) {
    case Average::kSamples:
      num = (correct.sum(1) / (positives.sum(1) + kEps)).sum();
      den = at::full({1}, static_cast<double>(t.size(0)), options);
      break;
    case Average::kMicro:
      num = correct.sum();
      den = positives.sum();
      break;
    default:
      num = correct.sum(0);
      den = positives.sum(0);
      if (average_ == Average::kWeighted) weight = t.sum(0).reshape({-1});
      break;
  }
  num = num.reshape({-1});
  den = den.reshape({-1});
  if (width_ == 0) {
    numerator_ = num;
    denominator_ = den;
    weight_ = weight;
    width_ = num.numel();
  } else {
    numerator_ = numerator_ + num;
    denominator_ = denominator_ + den;
    if (weight.defined()) weight_ = weight_ + weight;
  }
}

Value PrecisionRecallBase::compute() {
  const std::string who = "kindling::metrics::" + name();
  // Ranks that saw no input do not know the width: agree on it first (the largest width,
  // and the smallest among ranks with input, as max of its negation), so that every rank
  // reduces accumulators of one shape and every rank decides alike.
  const int64_t no_input = -std::numeric_limits<int64_t>::max();
  const at::Tensor widths =
      reduce(at::tensor({width_, width_ > 0 ? -width_ : no_input}, at::TensorOptions().dtype(at::kLong)).to(device()),
             dist::ReduceOp::kMax)
          .cpu();
  const int64_t width = widths[0].item<int64_t>();
  if (width == 0) {
    throw NotComputableError(detail::rank_prefix() + who + " must have at least one example before it can be computed");
  }
  const int64_t min_width = -widths[1].item<int64_t>();
  KINDLING_CHECK(min_width == width, who, ": the ranks saw inputs of different numbers of classes (", min_width,
                 " and ", width, "); every rank must feed the same kind of input");

  const auto options = at::TensorOptions().dtype(at::kDouble).device(device());
  auto local = [&](const at::Tensor& t) { return t.defined() ? t : at::zeros({width}, options); };
  const at::Tensor num = reduce(local(numerator_));
  const at::Tensor den = reduce(local(denominator_));
  const at::Tensor fraction = average_ == Average::kSamples ? num / den : num / (den + kEps);
  switch (average_) {
    case Average::kWeighted: {
      const at::Tensor w = reduce(local(weight_));
      return ((fraction * w).sum() / (w.sum() + kEps)).item<double>();
    }
    case Average::kMicro:
    case Average::kSamples: return fraction.item<double>();
    case Average::kMacro: return fraction.mean().item<double>();
    case Average::kFalse:
    case Average::kNone: break;
  }
  if (width == 1) return fraction.item<double>();  // binary + kFalse: the positive class only
  return fraction;
}

}  // namespace metrics
}  // namespace kindling
