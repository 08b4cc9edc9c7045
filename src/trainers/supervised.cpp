// The non-template parts of create_supervised_trainer / create_supervised_evaluator.
#include "kindling/engine/supervised.h"

#include <string>

#include "kindling/dist/dist.h"
#include "kindling/dist/same_settings.h"

namespace kindling {
namespace engine {

std::pair<at::Tensor, at::Tensor> prepare_batch(const data::Example& batch, std::optional<c10::Device> device,
                                                bool non_blocking) {
  if (!device) return {batch.data, batch.target};
  return {batch.data.to(*device, non_blocking), batch.target.to(*device, non_blocking)};
}

namespace detail {

void check_trainer_options(const SupervisedTrainerOptions& o) {
  KINDLING_CHECK(o.gradient_accumulation_steps() >= 1,
                 "kindling::engine::create_supervised_trainer: "
                 "gradient_accumulation_steps must be strictly positive, got ",
                 o.gradient_accumulation_steps(), "; 1 (the default) means no accumulation");
  KINDLING_CHECK(!o.scaler() || o.amp(),
                 "kindling::engine::create_supervised_trainer: a scaler is given but amp is "
                 "off; use amp(true) with the scaler, or drop the scaler");
  // A rank that trains with AMP beside ranks without it runs, silently, another computation.
  if (dist::is_initialized() && dist::get_world_size() > 1) {
    dist::require_same_settings("kindling::engine::create_supervised_trainer",
                                {{"amp", o.amp() ? "true" : "false"},
                                 {"gradient_accumulation_steps", std::to_string(o.gradient_accumulation_steps())},
                                 {"scaler", o.scaler() ? "given" : "none"}});
  }
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
