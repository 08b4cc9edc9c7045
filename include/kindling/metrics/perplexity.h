#pragma once
/// \file
/// Perplexity (ignite's): exp of the mean negative log-likelihood per token, from logits
/// y_pred of shape (N, C) or (N, C, d1, ...) and targets y of shape (N) or (N, d1, ...) (class
/// indices); targets equal to `ignore_index` are not counted. Cross entropy in float64.
///
/// \code
///   auto ppl = std::make_shared<kindling::metrics::Perplexity>();
///   ppl->attach(evaluator, "perplexity");   // output: (logits (N, vocab, T), tokens (N, T))
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order): the summed log-likelihood and the token count, summed over ranks. Checkpointed and
/// resharded to another world size by sums (Reshard::kSum).

#include <string>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API Perplexity : public Metric {
 public:
  explicit Perplexity(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU),
                      int64_t ignore_index = -100);
  void reset() override;
  /// Throws kindling::UsageError naming what was given when y_pred has not exactly one more
  /// dimension than y, their shapes do not match around the class dimension, y_pred is not
  /// floating point or y not integer; stores nothing then.
  void update(const Value& output) override;
  /// Over every rank's tokens (a collective). Throws NotComputableError when no rank counted a token.
  Value compute() override;
  std::string name() const override { return "Perplexity"; }

 private:
  int64_t ignore_index_;
  at::Tensor sum_of_nll_;  // float64, 0-dim
  int64_t num_tokens_ = 0;
};

}  // namespace metrics
}  // namespace kindling
