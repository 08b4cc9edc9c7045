#pragma once
/// \file
/// kindling::engine::State: where an Engine's run stands (ignite's `engine.state`).
/// Counters are 1-based as ignite's: during the first iteration, iteration == 1 and epoch == 1.

#include <any>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <typeinfo>

#include "kindling/engine/events.h"
#include "kindling/engine/value.h"
#include "kindling/error.h"
#include "kindling/export.h"

namespace kindling {
namespace engine {

/// The state of one Engine. Plain data, local to its process: handlers may read and write
/// it (e.g. a user attribute); the engine's own fields are best changed through Engine.
struct KINDLING_API State {
  /// Iterations done (the one running counts), over all epochs of the run.
  int64_t iteration = 0;
  /// The current epoch, from 1.
  int64_t epoch = 0;
  /// Iterations per epoch (from run()'s options or the data's size; unset while unknown).
  std::optional<int64_t> epoch_length;
  /// Epochs to run; unset when the run is bounded by max_iters.
  std::optional<int64_t> max_epochs;
  /// Iterations to run, when the run is bounded by iterations instead of epochs.
  std::optional<int64_t> max_iters;
  /// What the process function returned for the current (last) iteration.
  Value output;
  /// The current batch, as the data yields it (see batch_as()).
  std::any batch;
  /// Metric results by name (written by attached metrics); at() names a missing metric.
  ValueMap metrics{"state().metrics"};
  /// A seed for the user's own use (as ignite's State.seed; the engine does not read it:
  /// data order and augmentations follow the DataLoader's seed).
  std::optional<uint64_t> seed;
  /// Seconds taken: "EPOCH_COMPLETED" (the last epoch), "COMPLETED" (the whole run).
  std::map<std::string, double> times;
  /// User attributes (ignite's `engine.state.<anything>`); saved by Engine::state_dict()
  /// when their names are in Engine::state_dict_user_keys().
  ValueMap attributes{"state().attributes"};
  /// Times each user-defined event was fired (the counter of its filters), by event id.
  std::map<int, int64_t> custom_counts;

  /// The current batch as type B. Throws kindling::UsageError when there is no batch or it
  /// has another type (naming both).
  template <typename B>
  const B& batch_as() const {
    const B* b = std::any_cast<B>(&batch);
    if (b == nullptr) throw UsageError(batch_type_error(typeid(B)));
    return *b;
  }
  /// The value of `event`'s counter (iteration, epoch, or the custom count); -1 for events
  /// without a counter.
  int64_t counter(const Event& event) const;

 private:
  std::string batch_type_error(const std::type_info& wanted) const;
};

}  // namespace engine
}  // namespace kindling
