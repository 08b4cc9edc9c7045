#pragma once
/// \file
/// EpochOutputStore (ignite's): keeps the engine's output of every iteration of the current
/// epoch (after an output transform), for a handler that needs them all at the epoch's end (a
/// plot, a custom metric over the epoch).
///
/// \code
///   auto store = std::make_shared<kindling::handlers::EpochOutputStore>(
///       [](const kindling::engine::Value& out) { return kindling::engine::Value(out[0]); });
///   store->attach(evaluator, "predictions");   // at EPOCH_COMPLETED: state().attributes["predictions"]
///   evaluator.on(kindling::engine::Events::EPOCH_COMPLETED, [store](auto&) { use(store->data()); });
/// \endcode
///
/// Ranks: local; each rank keeps its own outputs (gather them with kindling::dist::all_gather
/// where every rank needs every output).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/value.h"
#include "kindling/export.h"

namespace kindling {
namespace handlers {

class KINDLING_API EpochOutputStore : public std::enable_shared_from_this<EpochOutputStore> {
 public:
  /// `output_transform` maps each output before it is kept (empty: kept as it is).
  explicit EpochOutputStore(std::function<engine::Value(const engine::Value&)> output_transform = {});
  /// Forgets the outputs kept.
  void reset() { data_.clear(); }
  /// Keeps the engine's current output (transformed).
  void update(engine::Engine& engine);
  /// Sets engine.state().attributes[name] to the outputs kept, as a tuple of tensors (a number
  /// becomes a 0-dim float64 tensor). Throws kindling::UsageError when an output is neither a
  /// number nor a tensor (naming its iteration and kind; transform it to one).
  void store(engine::Engine& engine, const std::string& name);
  /// Resets at EPOCH_STARTED and keeps each output at ITERATION_COMPLETED; with a `name`, also
  /// stores at EPOCH_COMPLETED. The engine keeps this store alive. Throws kindling::UsageError
  /// unless the store is owned by a std::shared_ptr.
  void attach(engine::Engine& engine, const std::string& name = "");
  /// The outputs kept since the epoch started, in iteration order.
  const std::vector<engine::Value>& data() const { return data_; }

 private:
  std::function<engine::Value(const engine::Value&)> output_transform_;
  std::vector<engine::Value> data_;
};

}  // namespace handlers
}  // namespace kindling
