#pragma once
/// \file
/// Fbeta (ignite's): F_beta = (1 + beta^2) * P * R / (beta^2 * P + R + 1e-15) from a
/// Precision and a Recall with Precision::Average::kFalse (or kNone), element-wise per class.
///
/// \code
///   auto f1 = Fbeta(1.0);                        // makes its own Precision and Recall
///   f1->attach(evaluator, "f1");                 // the mean over classes, a number
///   auto p = std::make_shared<Precision>(tf);    // or share them with other metrics
///   auto r = std::make_shared<Recall>(tf);
///   auto f2 = Fbeta(2.0, /*average=*/false, p, r);   // per class (a number for binary input)
/// \endcode
///
/// Ranks: as Precision and Recall: computing it is a collective on every rank.

#include <memory>
#include <optional>

#include "kindling/metrics/metrics_lambda.h"
#include "kindling/metrics/precision_recall.h"

namespace kindling {
namespace metrics {

/// F_beta as a MetricsLambda over `precision` and `recall`; a missing one is made with
/// Precision::Average::kFalse, `output_transform` and `device` (else the other metric's device; CPU
/// when neither is given). `average`: the plain mean over classes (a number), else the
/// per-class tensor. Throws kindling::UsageError when beta is not > 0, when output_transform
/// or device is given together with a precision or recall (they have their own), or when
/// a given metric's average is not Average::kFalse / kNone.
KINDLING_API std::shared_ptr<MetricsLambda> Fbeta(double beta, bool average = true,
                                                  std::shared_ptr<Precision> precision = nullptr,
                                                  std::shared_ptr<Recall> recall = nullptr,
                                                  OutputTransform output_transform = {},
                                                  std::optional<c10::Device> device = std::nullopt);

}  // namespace metrics
}  // namespace kindling
