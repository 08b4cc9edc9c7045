#pragma once
/// \file
/// RunningAverage (ignite's): an exponential moving average, value = value * alpha +
/// (1 - alpha) * new, the first new value taken as it is. Either of the engine's output
/// (through an output_transform, e.g. the batch loss) or of another metric (computed and
/// reset each iteration). Attached RunningBatchWise by default.
///
/// \code
///   auto batch_loss = RunningAverage::of_output([](const Value& out) { return out; });
///   batch_loss->attach(trainer, "batch_loss");
///   auto running_acc = RunningAverage::of_metric(std::make_shared<Accuracy>(...));
/// \endcode
///
/// Ranks: of the output, each update averages the value over the ranks (a collective every
/// iteration, as ignite), so every rank holds the same value; of a metric, the metric's own
/// compute reduces.

#include <memory>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API RunningAverage : public Metric {
 public:
  /// The running average of output_transform(engine output) (a number or tensor). Throws
  /// kindling::UsageError for an empty transform or alpha outside (0, 1].
  static std::shared_ptr<RunningAverage> of_output(OutputTransform output_transform, double alpha = 0.98,
                                                   c10::Device device = c10::Device(c10::kCPU));
  /// The running average of `src`'s value, computed and reset each time this updates.
  /// Throws kindling::UsageError for a null src or alpha outside (0, 1].
  static std::shared_ptr<RunningAverage> of_metric(std::shared_ptr<Metric> src, double alpha = 0.98);

  void reset() override;
  /// A collective in a distributed run (of_output: the all-reduce of the value; of_metric:
  /// src's compute). Throws kindling::UsageError for an output that is not a number or tensor.
  void update(const Value& output) override;
  /// The current average (none before the first update). Local.
  Value compute() override;
  std::string name() const override { return "RunningAverage"; }
  /// As Metric::attach, with RunningBatchWise as the default; for of_metric the source
  /// metric is updated on ITERATION_COMPLETED first.
  void attach(engine::Engine& engine, const std::string& name, const Usage& usage) override;
  void attach(engine::Engine& engine, const std::string& name) { attach(engine, name, Usage::kRunningBatchWise); }
  void detach(engine::Engine& engine, const Usage& usage) override;
  void detach(engine::Engine& engine) { detach(engine, Usage::kRunningBatchWise); }
  double alpha() const { return alpha_; }
  const std::shared_ptr<Metric>& src() const { return src_; }

 private:
  RunningAverage(OutputTransform output_transform, std::shared_ptr<Metric> src, double alpha, c10::Device device);
  std::shared_ptr<Metric> src_;
  double alpha_;
  at::Tensor value_;                                          // undefined before the first update
  std::map<const void*, engine::HandlerHandle> src_updates_;  // by Engine::id()
};

}  // namespace metrics
}  // namespace kindling
