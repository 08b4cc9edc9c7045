// BaseLogger's handlers (ignite's OutputHandler and OptimizerParamsHandler, shared with
// JsonLogger), global_step_from_engine, and TensorboardLogger's event file.
#include "kindling/handlers/loggers/tensorboard.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "common/strings.h"
#include "common/files.h"
#include "handlers/loggers/tensorboard/event_file.h"
#include "handlers/loggers/tensorboard/event_file_sink.h"
#include "handlers/loggers/logger_events.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {
namespace {

using engine::Engine;
using engine::Event;
using engine::EventCounter;
using engine::Value;
using Scalars = std::vector<std::pair<std::string, double>>;

const char* const kOtherParamNames =
    "momentum, dampening, weight_decay (SGD), eps, weight_decay (Adam, AdamW), lr_decay, weight_decay, "
    "initial_accumulator_value, eps (Adagrad), alpha, eps, weight_decay, momentum (RMSprop)";

// One warning per name and handler, for values that are not logged (ignite warns too).
class SkipWarnings {
 public:
  explicit SkipWarnings(std::string who) : who_(std::move(who)) {}
  void warn(const std::string& name, const std::string& why) {
    if (!warned_.insert(name).second) return;
    kindling::log(LogLevel::kWarning, "kindling::handlers::" + who_ + ": " + why + "; it is not logged");
  }

 private:
  std::string who_;
  std::set<std::string> warned_;
};

void add_tensor(const std::string& name, const at::Tensor& tensor, Scalars& out, SkipWarnings& warnings) {
  if (!tensor.defined()) {
    warnings.warn(name, "'" + name + "' is an undefined tensor");
  } else if (tensor.dim() > 1) {
    warnings.warn(name, "'" + name + "' is a tensor of " + std::to_string(tensor.dim()) +
                            " dimensions (numbers, 0-dim and 1-dim tensors are logged, as in ignite)");
  } else {
    const at::Tensor values = tensor.detach().cpu().to(at::kDouble).contiguous().reshape({-1});
    const double* data = values.data_ptr<double>();
    if (tensor.dim() == 0) {
      out.emplace_back(name, data[0]);
    } else {
      for (int64_t i = 0; i < values.numel(); ++i) out.emplace_back(name + "/" + std::to_string(i), data[i]);
    }
  }
}

void add_value(const std::string& name, const Value& value, Scalars& out, SkipWarnings& warnings) {
  switch (value.kind()) {
    case Value::Kind::kNumber: out.emplace_back(name, value.number()); return;
    case Value::Kind::kTensor: add_tensor(name, value.tensor(), out, warnings); return;
    case Value::Kind::kTuple:
      for (std::size_t i = 0; i < value.tuple_elements().size(); ++i) {
        add_tensor(name + "/" + std::to_string(i), value.tuple_elements()[i], out, warnings);
      }
      return;
    case Value::Kind::kNamed:
      for (const auto& [key, tensor] : value.named_elements()) add_tensor(name + "/" + key, tensor, out, warnings);
      return;
    case Value::Kind::kNone: warnings.warn(name, "'" + name + "' holds no value"); return;
  }
}

// The number `name` of one parameter group's options; nullopt when they have none.
std::optional<double> option_value(const torch::optim::OptimizerOptions& options, const std::string& name) {
  namespace optim = torch::optim;
  if (name == "lr") {
    try {
      return options.get_lr();
    } catch (const std::exception&) {  // options of a user's optimizer that does not override get_lr()
      return std::nullopt;
    }
  }
  if (const auto* sgd = dynamic_cast<const optim::SGDOptions*>(&options)) {
    if (name == "momentum") return sgd->momentum();
    if (name == "dampening") return sgd->dampening();
    if (name == "weight_decay") return sgd->weight_decay();
  } else if (const auto* adam = dynamic_cast<const optim::AdamOptions*>(&options)) {
    if (name == "eps") return adam->eps();
    if (name == "weight_decay") return adam->weight_decay();
  } else if (const auto* adamw = dynamic_cast<const optim::AdamWOptions*>(&options)) {
    if (name == "eps") return adamw->eps();
    if (name == "weight_decay") return adamw->weight_decay();
  } else if (const auto* adagrad = dynamic_cast<const optim::AdagradOptions*>(&options)) {
    if (name == "lr_decay") return adagrad->lr_decay();
    if (name == "weight_decay") return adagrad->weight_decay();
    if (name == "initial_accumulator_value") return adagrad->initial_accumulator_value();
    if (name == "eps") return adagrad->eps();
  } else if (const auto* rmsprop = dynamic_cast<const optim::RMSpropOptions*>(&options)) {
    if (name == "alpha") return rmsprop->alpha();
    if (name == "eps") return rmsprop->eps();
    if (name == "weight_decay") return rmsprop->weight_decay();
    if (name == "momentum") return rmsprop->momentum();
  }
  return std::nullopt;
}

// `name` of every parameter group, in order. Throws kindling::UsageError for a group without it.
std::vector<double> read_params(const torch::optim::Optimizer& optimizer, const std::string& name,
                                const std::string& where) {
  std::vector<double> values;
  const auto& groups = optimizer.param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    std::optional<double> value;
    if (groups[i].has_options()) value = option_value(groups[i].options(), name);
    KINDLING_CHECK(value.has_value(), where, ": parameter group ", i, " of the optimizer has no number named '", name,
                   "'; kindling reads \"lr\" from every optimizer, and ", kOtherParamNames);
    values.push_back(*value);
  }
  return values;
}

}  // namespace

namespace detail {

const Event& firing_event(const Engine& engine, const std::vector<Event>& events) {
  if (events.size() > 1 && engine.last_event()) {
    for (const Event& e : events) {
      if (e.same_event(*engine.last_event())) return e;
    }
  }
  return events.front();
}

void check_utf8_tag(const std::string& tag, const std::string& where) {
  KINDLING_CHECK(is_utf8(tag), where, ": the tag or name '", tag,
                 "' is not valid UTF-8 (TensorBoard reads tags as UTF-8 strings); use a UTF-8 tag");
}

void check_counters(const engine::EventsList& events, const std::string& where, const char* hint) {
  KINDLING_CHECK(!events.events().empty(), where, ": no event given; pass e.g. Events::EPOCH_COMPLETED");
  for (const Event& e : events.events()) {
    KINDLING_CHECK(e.counter() != EventCounter::kNone, where, ": event ", e.name(),
                   " has no counter to take the step from (it fires at most once per run); attach to an "
                   "iteration, epoch or user-defined event",
                   hint);
  }
}

}  // namespace detail

GlobalStepTransform global_step_from_engine(engine::Engine& other, std::optional<engine::Event> custom_event,
                                            engine::EventCounter fallback) {
  KINDLING_CHECK(fallback == EventCounter::kEpoch || fallback == EventCounter::kIteration,
                 "kindling::handlers::global_step_from_engine: fallback must be EventCounter::kEpoch or "
                 "EventCounter::kIteration (the counter used for events that have none, ignite's fallback_attr), "
                 "got another EventCounter; pass kEpoch (the default) or kIteration");
  const Engine* source = &other;
  return [source, custom_event, fallback](Engine&, const Event& fired) -> int64_t {
    const Event& event = custom_event ? *custom_event : fired;
    const engine::State& state = source->state();
    switch (event.counter()) {
      case EventCounter::kIteration: return state.iteration;
      case EventCounter::kEpoch: return state.epoch;
      case EventCounter::kOwn: {
        auto it = state.custom_counts.find(event.id());
        if (it != state.custom_counts.end()) return it->second;
        break;
      }
      case EventCounter::kNone: break;
    }
    return fallback == EventCounter::kIteration ? state.iteration : state.epoch;
  };
}

BaseLogger::BaseLogger(std::string who) : who_(std::move(who)) {}

BaseLogger::~BaseLogger() {
  try {
    close();
  } catch (const std::exception& e) {
    kindling::log(LogLevel::kError, e.what());
  }
}

void BaseLogger::close() {
  if (sink_) sink_->close();
}

engine::HandlerHandle BaseLogger::attach_output_handler(Engine& engine, const engine::EventsList& events,
                                                        const std::string& tag, std::vector<std::string> metric_names,
                                                        OutputScalarsTransform output_transform,
                                                        GlobalStepTransform global_step_transform) {
  const std::string where = "kindling::handlers::" + who_ + "::attach_output_handler";
  detail::check_utf8_tag(tag, where);
  for (const std::string& name : metric_names) detail::check_utf8_tag(name, where);
  KINDLING_CHECK(!metric_names.empty() || output_transform, where,
                 ": nothing to log: metric_names is empty and there is no output_transform; pass names from "
                 "engine.state().metrics ({\"all\"} for every metric), an output_transform, or both");
  KINDLING_CHECK(!events.events().empty(), where, ": no event given; pass e.g. Events::EPOCH_COMPLETED");
  if (!global_step_transform) {
    detail::check_counters(events, where, ", or pass a global_step_transform");
    global_step_transform = [](Engine& e, const Event& event) { return e.state().counter(event); };
  }
  const bool all_metrics = metric_names.size() == 1 && metric_names[0] == "all";
  auto warnings = std::make_shared<SkipWarnings>(who_);
  return engine.add_event_handler(events, [sink = sink_, list = events.events(), tag, metric_names, all_metrics,
                                           output_transform, global_step_transform, warnings](Engine& e) {
    if (!sink) return;  // inert on ranks other than 0
    const auto& metrics = e.state().metrics;
    Scalars scalars;
    if (all_metrics) {
      for (const auto& [name, value] : metrics) add_value(name, value, scalars, *warnings);
    } else {
      for (const std::string& name : metric_names) {
        auto it = metrics.find(name);
        if (it != metrics.end()) {
          add_value(name, it->second, scalars, *warnings);
          continue;
        }
        std::vector<std::string> present;
        for (const auto& kv : metrics) present.push_back(kv.first);
        warnings->warn(name, "metric '" + name + "' is not in the engine's state().metrics (which has: " +
                                 (present.empty() ? std::string("none") : kindling::detail::join(present)) + ")");
      }
    }
    if (output_transform) {
      for (const auto& [name, value] : output_transform(e.state().output)) scalars.emplace_back(name, value);
    }
    const int64_t step = global_step_transform(e, detail::firing_event(e, list));
    for (const auto& [name, value] : scalars) sink->write(tag, name, value, step);
  });
}

engine::HandlerHandle BaseLogger::attach_opt_params_handler(Engine& engine, const engine::EventsList& events,
                                                            torch::optim::Optimizer& optimizer,
                                                            const std::string& param_name,
                                                            const std::optional<std::string>& tag) {
  const std::string where = "kindling::handlers::" + who_ + "::attach_opt_params_handler";
  detail::check_counters(events, where, "");
  KINDLING_CHECK(!optimizer.param_groups().empty(), where,
                 ": the optimizer has no parameter group; attach after giving it its parameters");
  read_params(optimizer, param_name, where);  // fails now rather than at the first event
  return engine.add_event_handler(events, [sink = sink_, list = events.events(), optimizer = &optimizer, param_name,
                                           tag = tag.value_or(""), where](Engine& e) {
    if (!sink) return;  // inert on ranks other than 0
    const int64_t step = e.state().counter(detail::firing_event(e, list));
    const std::vector<double> values = read_params(*optimizer, param_name, where);
    for (std::size_t i = 0; i < values.size(); ++i) {
      sink->write(tag, param_name + "/group_" + std::to_string(i), values[i], step);
    }
  });
}

TensorboardLogger::TensorboardLogger(std::string log_dir)
    : BaseLogger("TensorboardLogger"), log_dir_(std::move(log_dir)) {
  KINDLING_CHECK(!log_dir_.empty(),
                 "kindling::handlers::TensorboardLogger: log_dir is an empty string; give the directory for the "
                 "event files, e.g. \"runs/exp1\"");
  if (detail::this_rank() != 0) return;  // inert
  events_ = std::make_shared<detail::EventFileSink>(log_dir_);
  file_path_ = events_->path();
  set_sink(events_);
}

void TensorboardLogger::add_scalar(const std::string& tag, double value, int64_t step) {
  detail::check_utf8_tag(tag, "kindling::handlers::TensorboardLogger::add_scalar");
  if (sink() != nullptr) sink()->write("", tag, value, step);
}

}  // namespace handlers
}  // namespace kindling
