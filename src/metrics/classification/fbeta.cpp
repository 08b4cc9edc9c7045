// Fbeta: one MetricsLambda over a Precision and a Recall.
#include "kindling/metrics/fbeta.h"

#include <ATen/ATen.h>

namespace kindling {
namespace metrics {

std::shared_ptr<MetricsLambda> Fbeta(double beta, bool average, std::shared_ptr<Precision> precision,
                                     std::shared_ptr<Recall> recall, OutputTransform output_transform,
                                     std::optional<c10::Device> device) {
  KINDLING_CHECK(beta > 0, "kindling::metrics::Fbeta: beta should be a positive number, but given ", beta);
  const char* const which[] = {"precision", "recall"};
  const bool given[] = {precision != nullptr, recall != nullptr};
  for (int i = 0; i < 2; ++i) {
    if (!given[i]) continue;
    KINDLING_CHECK(!output_transform, "kindling::metrics::Fbeta: if ", which[i],
                   " argument is provided, "
                   "output_transform should be empty (the given metric applies its own)");
    KINDLING_CHECK(!device.has_value(), "kindling::metrics::Fbeta: if ", which[i],
                   " argument is provided, device "
                   "should be std::nullopt (the given metric has its own)");
  }
  if (!precision) {
    const c10::Device d = recall ? recall->device() : device.value_or(c10::Device(c10::kCPU));
    precision = std::make_shared<Precision>(output_transform, Precision::Average::kFalse, false, d);
  }
  using A = PrecisionRecallBase::Average;
  KINDLING_CHECK(precision->average() == A::kFalse || precision->average() == A::kNone,
                 "kindling::metrics::Fbeta: input precision metric should have average=False (Average::kFalse), but "
                 "it has ",
                 to_string(precision->average()));
  if (!recall) recall = std::make_shared<Recall>(output_transform, Recall::Average::kFalse, false, precision->device());
  KINDLING_CHECK(recall->average() == A::kFalse || recall->average() == A::kNone,
                 "kindling::metrics::Fbeta: input recall metric should have average=False (Average::kFalse), but it "
                 "has ",
                 to_string(recall->average()));

  const double b2 = beta * beta;
  auto f = [b2, average](const std::vector<Value>& v) -> Value {
    const at::Tensor p = v[0].tensor().to(at::kDouble);
    const at::Tensor r = v[1].tensor().to(at::kDouble);
    const at::Tensor fb = (1.0 + b2) * p * r / (b2 * p + r + 1e-15);
    if (average) return fb.mean().item<double>();
    if (fb.dim() == 0) return fb.item<double>();
    return fb;
  };
  return std::make_shared<MetricsLambda>(std::move(f), std::vector<std::shared_ptr<Metric>>{precision, recall});
}

}  // namespace metrics
}  // namespace kindling
