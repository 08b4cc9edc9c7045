// RankingMetric: the ranking metrics' base, an EpochMetric that checks each batch's kind.
#include "kindling/metrics/ranking.h"

#include <utility>

#include "metrics/ranking/ranking_curve.h"

namespace kindling {
namespace metrics {

RankingMetric::RankingMetric(ComputeFunction compute_fn, bool binary_only, OutputTransform output_transform,
                             bool check_compute_fn, c10::Device device)
    : EpochMetric(std::move(compute_fn), std::move(output_transform), check_compute_fn, device),
      binary_only_(binary_only) {}

void RankingMetric::check_input(const at::Tensor& y_pred, const at::Tensor& y) const {
  ::kindling::detail::ranking_task(y_pred, y, "kindling::metrics::" + name(), binary_only_, /*check_values=*/false);
}

const char* to_string(RankingMetric::Average average) {
  switch (average) {
    case RankingMetric::Average::kMacro: return "macro";
    case RankingMetric::Average::kWeighted: return "weighted";
    case RankingMetric::Average::kMicro: return "micro";
    case RankingMetric::Average::kNone: return "None";
  }
  return "?";
}

}  // namespace metrics
}  // namespace kindling
