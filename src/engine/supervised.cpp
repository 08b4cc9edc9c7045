// The non-template parts of create_supervised_trainer / create_supervised_evaluator.
#include "kindling/engine/supervised.h"

namespace kindling {
namespace engine {

std::pair<at::Tensor, at::Tensor> prepare_batch(const data::Example& batch, std::optional<c10::Device> device,
                                                bool non_blocking) {
  if (!device) return {batch.data, batch.target};
  return {batch.data.to(*device, non_blocking), batch.target.to(*device, non_blocking)};
}

namespace detail {

void check_accumulation_steps(int64_t steps) {
  KINDLING_CHECK(steps >= 1,
                 "kindling::engine::create_supervised_trainer: gradient_accumulation_steps must be "
                 "strictly positive, got ",
                 steps, "; 1 (the default) means no accumulation");
}

void attach_metrics(Engine& evaluator, const NamedMetrics& metrics) {
  for (const auto& [name, metric] : metrics) {
    KINDLING_CHECK(metric != nullptr, "kindling::engine::create_supervised_evaluator: metric '", name, "' is null");
    metric->attach(evaluator, name);
  }
}

}  // namespace detail
}  // namespace engine
}  // namespace kindling
