// The input rules of ignite.metrics.regression (regression_checks.h).
#include "metrics/regression/regression_checks.h"

#include <ATen/ATen.h>

#include "kindling/error.h"
#include "kindling/metrics/metric.h"

namespace kindling {
namespace detail {

void check_regression_pair(const std::string& metric, const at::Tensor& y_pred, const at::Tensor& y) {
  const auto check = [&](const at::Tensor& t, const char* what) {
    KINDLING_CHECK(t.dim() == 1 || (t.dim() == 2 && t.size(1) == 1), "kindling::metrics::", metric, ": ", what,
                   " must have shape (N,) or (N, 1), but given ", t.sizes());
    KINDLING_CHECK(at::isFloatingType(t.scalar_type()), "kindling::metrics::", metric, ": ", what,
                   " must be floating point (float16, bfloat16, float32 or float64), but given ", t.scalar_type(),
                   "; convert it, e.g. with .to(at::kFloat)");
  };
  check(y_pred, "y_pred");
  check(y, "y");
  KINDLING_CHECK(y_pred.sizes() == y.sizes(), "kindling::metrics::", metric,
                 ": y_pred and y must have the same shape, but given ", y_pred.sizes(), " and ", y.sizes());
}

void refuse_zero_targets(const std::string& metric, const at::Tensor& y) {
  const at::Tensor zeros = (y.reshape({-1}) == 0).nonzero();
  if (zeros.numel() == 0) return;
  throw metrics::NotComputableError(
      rank_prefix() + "kindling::metrics::" + metric + ": y is 0 at row " +
      std::to_string(zeros[0][0].item<int64_t>()) +
      " of this batch, and this metric divides by y; the batch was not counted. Leave rows "
      "whose target is 0 out of this metric (an output transform), or use MeanAbsoluteError");
}

}  // namespace detail
}  // namespace kindling
