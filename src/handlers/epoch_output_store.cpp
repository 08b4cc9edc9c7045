// EpochOutputStore (kindling/handlers/epoch_output_store.h): the outputs of one epoch.
#include "kindling/handlers/epoch_output_store.h"

#include <ATen/ATen.h>

#include <utility>

#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {

using engine::Engine;
using engine::Events;
using engine::Value;

EpochOutputStore::EpochOutputStore(std::function<Value(const Value&)> output_transform)
    : output_transform_(std::move(output_transform)) {}

void EpochOutputStore::update(Engine& engine) {
  const Value& output = engine.state().output;
  data_.push_back(output_transform_ ? output_transform_(output) : output);
}

void EpochOutputStore::store(Engine& engine, const std::string& name) {
  std::vector<at::Tensor> tensors;
  for (std::size_t i = 0; i < data_.size(); ++i) {
    const Value& v = data_[i];
    KINDLING_CHECK(v.is_number() || v.is_tensor(), "kindling::handlers::EpochOutputStore: the output of iteration ",
                   i + 1, " of the epoch is ", v.to_string(),
                   "; only numbers and tensors can be stored in the engine's state (give an output_transform that "
                   "picks one, or read data())");
    tensors.push_back(v.is_number() ? at::scalar_tensor(v.number(), at::kDouble) : v.tensor());
  }
  engine.state().attributes[name] = Value::tuple(std::move(tensors));
}

void EpochOutputStore::attach(Engine& engine, const std::string& name) {
  std::shared_ptr<EpochOutputStore> self = engine::keep_alive(*this, "kindling::handlers::EpochOutputStore");
  engine.add_event_handler(Events::EPOCH_STARTED, [self](Engine&) { self->reset(); });
  engine.add_event_handler(Events::ITERATION_COMPLETED, [self](Engine& e) { self->update(e); });
  if (!name.empty())
    engine.add_event_handler(Events::EPOCH_COMPLETED, [self, name](Engine& e) { self->store(e, name); });
}

}  // namespace handlers
}  // namespace kindling
