// kindling::engine::State and the Engine's state dict (ignite's keys, rules and messages).
#include <c10/util/Type.h>

#include "kindling/engine/engine.h"
#include "kindling/error.h"

namespace kindling {
namespace engine {

int64_t State::counter(const Event& event) const {
  switch (event.counter()) {
    case EventCounter::kIteration: return iteration;
    case EventCounter::kEpoch: return epoch;
    case EventCounter::kOwn: {
      auto it = custom_counts.find(event.id());
      return it == custom_counts.end() ? 0 : it->second;
    }
    case EventCounter::kNone: return -1;
  }
  return -1;
}

std::string State::batch_type_error(const std::type_info& wanted) const {
  return ::kindling::detail::rank_prefix() + "kindling::engine::State::batch_as<" + c10::demangle(wanted.name()) +
         ">: " +
         (batch.has_value() ? "the batch has type " + c10::demangle(batch.type().name())
                            : std::string("there is no current batch (outside an iteration)"));
}

namespace {

c10::IValue to_ivalue(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNone: return c10::IValue();
    case Value::Kind::kNumber: return c10::IValue(v.number());
    case Value::Kind::kTensor: return c10::IValue(v.tensor());
    case Value::Kind::kTuple: return c10::IValue(c10::List<at::Tensor>(v.tuple_elements()));
    case Value::Kind::kNamed: {
      c10::Dict<std::string, at::Tensor> d;
      for (const auto& kv : v.named_elements()) d.insert(kv.first, kv.second);
      return c10::IValue(d);
    }
  }
  return c10::IValue();
}

Value from_ivalue(const c10::IValue& v, const std::string& key) {
  if (v.isNone()) return Value();
  if (v.isDouble()) return Value(v.toDouble());
  if (v.isInt()) return Value(v.toInt());
  if (v.isBool()) return Value(v.toBool());
  if (v.isTensor()) return Value(v.toTensor());
  if (v.isTensorList()) return Value::tuple(v.toTensorVector());
  if (v.isGenericDict()) {
    std::map<std::string, at::Tensor> named;
    for (const auto& kv : v.toGenericDict()) {
      KINDLING_CHECK(kv.key().isString() && kv.value().isTensor(),
                     "kindling::engine::Engine::load_state_dict: "
                     "user key '",
                     key, "' holds a dict that is not string -> tensor");
      named.emplace(kv.key().toStringRef(), kv.value().toTensor());
    }
    return Value::named(std::move(named));
  }
  KINDLING_CHECK(false, "kindling::engine::Engine::load_state_dict: user key '", key, "' holds a ", v.tagKind(),
                 ", which a State attribute cannot hold (number, tensor, tensor list, or dict of tensors)");
  return Value();
}

int64_t get_int(const StateDict& sd, const char* key) {
  const c10::IValue v = sd.at(key);
  KINDLING_CHECK(v.isInt(), "kindling::engine::Engine::load_state_dict: '", key, "' should be an integer, got a ",
                 v.tagKind());
  return v.toInt();
}

}  // namespace

Engine::DataOrigin Engine::read_origin(const StateDict& sd, const std::string& where) {
  DataOrigin origin;
  if (!sd.contains("data_origin")) return origin;
  const c10::IValue& v = sd.at("data_origin");
  KINDLING_CHECK(v.isIntList() && v.toIntList().size() == 3, where,
                 ": 'data_origin' should be a list of 3 integers (iteration, epoch, pass), got a ", v.tagKind());
  const auto list = v.toIntList();
  origin = DataOrigin{list.get(0), list.get(1), list.get(2)};
  KINDLING_CHECK(origin.iteration >= 0 && origin.epoch >= 0 && origin.pass >= 0, where,
                 ": 'data_origin' should not hold negative numbers, got (", origin.iteration, ", ", origin.epoch, ", ",
                 origin.pass, ")");
  return origin;
}

StateDict Engine::state_dict() const {
  StateDict sd = new_state_dict();
  sd.insert("epoch_length", state_.epoch_length ? c10::IValue(*state_.epoch_length) : c10::IValue());
  if (state_.max_iters) {
    sd.insert("max_iters", *state_.max_iters);
  } else {
    sd.insert("max_epochs", state_.max_epochs ? c10::IValue(*state_.max_epochs) : c10::IValue());
  }
  sd.insert("iteration", state_.iteration);
  // Only after a terminate_epoch(): where the fresh pass began (ignite and older kindling
  // files have no such key, and ignite ignores it).
  if (origin_.iteration != 0 || origin_.epoch != 0 || origin_.pass != 0)
    sd.insert("data_origin", c10::List<int64_t>({origin_.iteration, origin_.epoch, origin_.pass}));
  // How the data was sharded (kindling's DataLoader): lets a run at another world size resume
  // at the same sample (ignite ignores the key).
  if (sharding_)
    sd.insert("data_sharding", c10::List<int64_t>({sharding_->replicas, sharding_->samples_per_iteration}));
  for (const auto& key : user_keys_) {
    auto it = state_.attributes.find(key);
    KINDLING_CHECK(it != state_.attributes.end(), "kindling::engine::", name, ".state_dict: user key '", key,
                   "' is in state_dict_user_keys() but not in state().attributes; set it before saving");
    sd.insert(key, to_ivalue(it->second));
  }
  return sd;
}

void Engine::load_state_dict(const StateDict& sd) {
  const std::string where = "kindling::engine::" + name + ".load_state_dict";
  std::vector<std::string> required{"epoch_length"};
  for (const auto& k : user_keys_) required.push_back(k);
  for (const auto& k : required) {
    KINDLING_CHECK(sd.contains(k), where, ": required state attribute '", k, "' is absent in provided state_dict");
  }
  const bool has_epochs = sd.contains("max_epochs"), has_iters = sd.contains("max_iters");
  KINDLING_CHECK(has_epochs != has_iters, where,
                 ": state_dict should contain only one of '('max_epochs', "
                 "'max_iters')' keys, got ",
                 has_epochs && has_iters ? "both" : "neither");
  const bool has_iteration = sd.contains("iteration"), has_epoch = sd.contains("epoch");
  KINDLING_CHECK(has_iteration != has_epoch, where,
                 ": state_dict should contain only one of '('iteration', "
                 "'epoch')' keys, got ",
                 has_iteration && has_epoch ? "both" : "neither");

  std::optional<int64_t> epoch_length;
  if (!sd.at("epoch_length").isNone()) epoch_length = get_int(sd, "epoch_length");
  KINDLING_CHECK(!epoch_length || *epoch_length >= 1, where, ": epoch_length should be at least 1, got ",
                 *epoch_length);
  std::optional<int64_t> max_epochs, max_iters;
  if (has_epochs && !sd.at("max_epochs").isNone()) max_epochs = get_int(sd, "max_epochs");
  if (has_iters) max_iters = get_int(sd, "max_iters");

  const DataOrigin origin = read_origin(sd, where);
  const std::optional<detail::Sharding> sharding = read_sharding(sd, where);
  int64_t iteration = 0, epoch = 0;
  if (has_iteration) {
    iteration = get_int(sd, "iteration");
    KINDLING_CHECK(iteration >= origin.iteration, where,
                   ": iteration should not be negative or before data_origin, got ", iteration);
    epoch = epoch_length ? origin.epoch + (iteration - origin.iteration) / *epoch_length : 0;
  } else {
    epoch = get_int(sd, "epoch");
    KINDLING_CHECK(epoch >= 0, where, ": epoch should not be negative, got ", epoch);
    KINDLING_CHECK(epoch == 0 || epoch_length, where, ": epoch_length should be defined to load an epoch");
    iteration = epoch_length ? epoch * *epoch_length : 0;
  }
  KINDLING_CHECK(!max_epochs || epoch <= *max_epochs, where,
                 ": max_epochs should be larger than or equal to the "
                 "current epoch defined in the state: ",
                 *max_epochs, " vs ", epoch);
  KINDLING_CHECK(!max_iters || iteration <= *max_iters, where,
                 ": max_iters should be larger than or equal to the "
                 "current iteration defined in the state: ",
                 *max_iters, " vs ", iteration);
  std::map<std::string, Value> user;
  for (const auto& k : user_keys_) user[k] = from_ivalue(sd.at(k), k);

  // Everything checked: change the state.
  state_.epoch_length = epoch_length;
  state_.max_epochs = max_epochs;
  state_.max_iters = max_iters;
  state_.iteration = iteration;
  state_.epoch = epoch;
  origin_ = origin;
  sharding_ = sharding;
  for (auto& kv : user) state_.attributes[kv.first] = std::move(kv.second);
  // A loaded state replaces a run paused by interrupt(): the next run() resumes from it.
  interrupted_at_ = Phase::kNone;
  data_started_ = false;
}

}  // namespace engine
}  // namespace kindling
