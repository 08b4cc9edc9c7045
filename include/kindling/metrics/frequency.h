#pragma once
/// \file
/// Frequency (ignite's): how many things (samples, tokens: the summed outputs) the engine
/// processes per second since the epoch started, over all ranks: the ranks' counts summed,
/// divided by their mean elapsed time. Attached with Usage::kSingleEpochRunningBatchWise by
/// default (ignite's FrequencyWise: reset at EPOCH_STARTED, computed after every iteration).
///
/// \code
///   auto tokens_per_s = std::make_shared<kindling::metrics::Frequency>(
///       [](const kindling::engine::Value& out) { return out["ntokens"]; });
///   tokens_per_s->attach(trainer, "tps");   // state().metrics["tps"], an integer
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order). A rate, not a state: nothing of it is checkpointed (a resumed epoch counts from
/// where it resumed).

#include <chrono>
#include <string>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API Frequency : public Metric {
 public:
  explicit Frequency(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  /// Restarts the clock and the count.
  void reset() override;
  /// Adds the (transformed) output, a number or a one-element tensor, to the count and reads
  /// the clock. Throws kindling::UsageError for another output.
  void update(const Value& output) override;
  /// int(count over all ranks / mean of the ranks' elapsed seconds), as ignite (a collective).
  /// Throws NotComputableError before any update on every rank.
  Value compute() override;
  std::string name() const override { return "Frequency"; }
  /// As Metric::attach, with ignite's FrequencyWise as the default usage (through a Metric
  /// pointer the default is Metric's, kEpochWise: the rate over each whole epoch).
  void attach(engine::Engine& engine, const std::string& name,
              const Usage& usage = Usage::kSingleEpochRunningBatchWise) override;

 private:
  std::chrono::steady_clock::time_point start_;
  double count_ = 0;
  double elapsed_ = 0;  // seconds from reset() to the last update()
};

}  // namespace metrics
}  // namespace kindling
