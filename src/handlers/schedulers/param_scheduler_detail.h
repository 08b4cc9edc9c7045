#pragma once
// Internal to the parameter schedulers (param_scheduler.cpp, param_scheduler_composite.cpp):
// reading and writing an optimizer's options by name, state-dict readers, the simulation loop.
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/optim/sgd.h>

#include <string>
#include <type_traits>
#include <vector>

#include "kindling/error.h"
#include "kindling/handlers/schedulers/param_scheduler.h"

namespace kindling {
namespace handlers {
namespace scheduler_detail {

inline constexpr const char* kSupportedParams =
    "\"lr\" (every optimizer), \"momentum\" (SGD, RMSprop), \"weight_decay\" (SGD, Adam, AdamW, RMSprop, Adagrad)";

// Calls f on `o` as the first of Os that it is; false when it is none of them.
template <typename... Os, typename F>
bool visit_options(torch::optim::OptimizerOptions& o, F&& f) {
  return ((dynamic_cast<Os*>(&o) != nullptr && (f(*dynamic_cast<Os*>(&o)), true)) || ...);
}

// Writes `*value` (when given) to option `name` of `o`, then reads it into *out; false when
// `o` has no such option. Rethrows c10::Error from options classes without get_lr/set_lr.
inline bool access_option(torch::optim::OptimizerOptions& o, const std::string& name, const double* value,
                          double* out) {
  namespace optim = torch::optim;
  if (name == "lr") {
    if (value != nullptr) o.set_lr(*value);
    *out = o.get_lr();
    return true;
  }
  if (name == "momentum") {
    return visit_options<optim::SGDOptions, optim::RMSpropOptions>(o, [&](auto& x) {
      if (value != nullptr) x.momentum(*value);
      *out = x.momentum();
    });
  }
  if (name == "weight_decay") {
    return visit_options<optim::SGDOptions, optim::AdamOptions, optim::AdamWOptions, optim::RMSpropOptions,
                         optim::AdagradOptions>(o, [&](auto& x) {
      if (value != nullptr) x.weight_decay(*value);
      *out = x.weight_decay();
    });
  }
  return false;
}

inline double read_option(const torch::optim::Optimizer& opt, std::size_t group, const std::string& name) {
  double out = 0;
  access_option(const_cast<torch::optim::OptimizerOptions&>(opt.param_groups()[group].options()), name, nullptr, &out);
  return out;
}
inline void write_option(torch::optim::Optimizer& opt, std::size_t group, const std::string& name, double value) {
  double out = 0;
  access_option(opt.param_groups()[group].options(), name, &value, &out);
}
// The option in every group, and back.
inline std::vector<double> read_all(const torch::optim::Optimizer& opt, const std::string& name) {
  std::vector<double> out;
  for (std::size_t g = 0; g < opt.param_groups().size(); ++g) out.push_back(read_option(opt, g, name));
  return out;
}
inline void write_all(torch::optim::Optimizer& opt, const std::string& name, const std::vector<double>& values) {
  for (std::size_t g = 0; g < values.size(); ++g) write_option(opt, g, name, values[g]);
}

// LibTorch's LRScheduler keeps get_lrs(), get_current_lrs() and step_count_ protected; pointers to them named
// through a derived class are allowed by the access rules (this class is never instantiated).
struct TorchSchedulerAccess : torch::optim::LRScheduler {
  static std::vector<double> lrs(torch::optim::LRScheduler& s) { return (s.*&TorchSchedulerAccess::get_lrs)(); }
  static unsigned& step_count(torch::optim::LRScheduler& s) { return s.*&TorchSchedulerAccess::step_count_; }
  static std::vector<double> current_lrs(const torch::optim::LRScheduler& s) {
    return (s.*&TorchSchedulerAccess::get_current_lrs)();
  }
};

// State-dict readers: each throws kindling::UsageError naming the key and what it holds.
inline std::string keys_of(const StateDict& sd) {
  std::string out;
  for (const auto& kv : sd) {
    out += (out.empty() ? "" : ", ") + (kv.key().isString() ? kv.key().toStringRef() : kv.key().tagKind());
  }
  return "{" + out + "}";
}
inline c10::IValue require(const StateDict& sd, const char* key, const std::string& who) {
  KINDLING_CHECK(sd.contains(key), who, ": required state attribute '", key, "' is absent in the state_dict with keys ",
                 keys_of(sd), "; pass a state_dict saved by the same kind of scheduler");
  return sd.at(key);
}
inline int64_t read_int(const StateDict& sd, const char* key, const std::string& who) {
  const c10::IValue v = require(sd, key, who);
  KINDLING_CHECK(v.isInt(), who, ": state attribute '", key, "' holds a ", v.tagKind(), ", expected an integer");
  return v.toInt();
}
inline double read_double(const StateDict& sd, const char* key, const std::string& who) {
  const c10::IValue v = require(sd, key, who);
  KINDLING_CHECK(v.isDouble() || v.isInt(), who, ": state attribute '", key, "' holds a ", v.tagKind(),
                 ", expected a number");
  return v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
}
// A list of integers (T = int64_t) or of numbers (T = double).
template <typename T>
std::vector<T> read_list(const StateDict& sd, const char* key, const std::string& who) {
  const c10::IValue v = require(sd, key, who);
  KINDLING_CHECK(v.isList(), who, ": state attribute '", key, "' holds a ", v.tagKind(), ", expected a list");
  constexpr bool kInt = std::is_integral<T>::value;
  std::vector<T> out;
  const c10::List<c10::IValue> list = v.toList();
  for (std::size_t i = 0; i < list.size(); ++i) {
    const c10::IValue e = list.get(i);
    KINDLING_CHECK(e.isInt() || (!kInt && e.isDouble()), who, ": element ", i, " of state attribute '", key,
                   "' holds a ", e.tagKind(), kInt ? ", expected an integer" : ", expected a number");
    out.push_back(e.isInt() ? static_cast<T>(e.toInt()) : static_cast<T>(e.toDouble()));
  }
  return out;
}

// Advances `s` n times; (i, first value set) after each event.
inline SimulatedValues simulate(ParamScheduler& s, int64_t n) {
  KINDLING_CHECK(n >= 0, s.who(), "::simulate_values: num_events is ", n, ", expected >= 0");
  SimulatedValues out;
  for (int64_t i = 0; i < n; ++i) {
    s.advance();
    out.emplace_back(i, s.current_values().front());
  }
  return out;
}

// Loads each state into its scheduler; when one throws, puts every scheduler back as it was.
inline void load_all(const std::vector<ParamScheduler*>& schedulers, const std::vector<StateDict>& states) {
  std::vector<StateDict> backup;
  for (ParamScheduler* s : schedulers) backup.push_back(s->state_dict());
  try {
    for (std::size_t i = 0; i < schedulers.size(); ++i) schedulers[i]->load_state_dict(states[i]);
  } catch (...) {
    for (std::size_t i = 0; i < schedulers.size(); ++i) schedulers[i]->load_state_dict(backup[i]);
    throw;
  }
}

// What every scheduler's state_dict holds: "event_index" (>= 0), "save_history" (a bool) and
// "param_name", which must be `param_name`. Throws kindling::UsageError naming `who` otherwise.
struct BaseState {
  int64_t event_index;
  bool save_history;
};
inline BaseState read_base_state(const StateDict& sd, const std::string& who, const std::string& param_name) {
  const int64_t event_index = read_int(sd, "event_index", who);
  const c10::IValue name = require(sd, "param_name", who);
  const c10::IValue save = require(sd, "save_history", who);
  KINDLING_CHECK(event_index >= 0, who, ": event_index is ", event_index, " in the state_dict, expected >= 0");
  KINDLING_CHECK(name.isString() && name.toStringRef() == param_name, who, ": the state_dict is of a scheduler of '",
                 name.isString() ? name.toStringRef() : name.tagKind(), "', this one sets '", param_name,
                 "'; load the state of the matching scheduler");
  KINDLING_CHECK(save.isBool(), who, ": state attribute 'save_history' holds a ", save.tagKind(), ", expected a bool");
  return {event_index, save.toBool()};
}

// ignite's {"schedulers": [(name, state_dict), ...]} of a ParamGroupScheduler.
inline StateDict named_states(const std::vector<std::string>& names, const std::vector<ParamScheduler*>& schedulers) {
  c10::impl::GenericList list(c10::AnyType::get());
  for (std::size_t i = 0; i < schedulers.size(); ++i) {
    list.push_back(c10::ivalue::Tuple::create(c10::IValue(names[i]), c10::IValue(schedulers[i]->state_dict())));
  }
  StateDict sd = new_state_dict();
  sd.insert("schedulers", list);
  return sd;
}
// Loads named_states() into `schedulers` (all or none); throws kindling::UsageError naming `who`
// for another count, another name at a position, or an entry that is not a (name, dict) pair.
inline void load_named_states(const std::string& who, const StateDict& sd, const std::vector<std::string>& names,
                              const std::vector<ParamScheduler*>& schedulers) {
  const c10::IValue v = require(sd, "schedulers", who);
  const std::size_t n = v.isList() ? v.toList().size() : 0;
  KINDLING_CHECK(n == schedulers.size(), who, ": the state_dict holds ", n, " state dicts of param group schedulers, ",
                 "but ", schedulers.size(), " are needed");
  std::vector<StateDict> states;
  for (std::size_t i = 0; i < n; ++i) {
    const c10::IValue e = v.toList().get(i);
    std::vector<c10::IValue> pair;
    if (e.isTuple()) pair.assign(e.toTupleRef().elements().begin(), e.toTupleRef().elements().end());
    if (e.isList()) pair = e.toList().vec();
    KINDLING_CHECK(pair.size() == 2 && pair[0].isString() && pair[1].isGenericDict(), who, ": scheduler ", i,
                   " of the state_dict is a ", e.tagKind(), ", expected a (name, state dict) pair");
    KINDLING_CHECK(pair[0].toStringRef() == names[i], who, ": name of scheduler ", i, " is '", pair[0].toStringRef(),
                   "' in the state_dict, expected '", names[i], "'");
    states.push_back(pair[1].toGenericDict());
  }
  load_all(schedulers, states);
}

}  // namespace scheduler_detail
}  // namespace handlers
}  // namespace kindling
