// The state schedulers (kindling/handlers/schedulers/state_param_scheduler.h): a value of
// engine.state().attributes set at each event from the event index.
#include "kindling/handlers/schedulers/state_param_scheduler.h"

#include <algorithm>
#include <cmath>

#include "handlers/schedulers/param_scheduler_detail.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

using engine::Engine;
using engine::Value;

StateParamScheduler::StateParamScheduler(const char* class_name, std::string param_name, bool save_history,
                                         bool create_new)
    : class_name_(class_name),
      param_name_(std::move(param_name)),
      save_history_(save_history),
      create_new_(create_new) {
  KINDLING_CHECK(!param_name_.empty(), who(), ": param_name (the engine state's attribute to set) must not be empty");
}

StateParamScheduler::~StateParamScheduler() = default;

std::string StateParamScheduler::who() const { return std::string("kindling::handlers::") + class_name_; }

engine::HandlerHandle StateParamScheduler::attach(Engine& engine, const engine::EventsList& event) {
  std::shared_ptr<StateParamScheduler> self = engine::keep_alive(*this, who());
  auto& attributes = engine.state().attributes;
  if (attributes.count(param_name_) != 0) {
    KINDLING_CHECK(!create_new_, who(), ": the attribute '", param_name_,
                   "' already exists in the engine's state (another handler may set it); choose another param_name");
  } else {
    if (!create_new_) {
      kindling::log(LogLevel::kWarning, who() + ": the attribute '" + param_name_ +
                                            "' is not in the engine's state; it is created (construct with "
                                            "create_new = true to say so and silence this warning)");
    }
    attributes[param_name_] = Value();
  }
  return engine.add_event_handler(event, [self](Engine& e) { (*self)(e); });
}

void StateParamScheduler::operator()(Engine& engine) {
  ++event_index_;
  const Value value = get_param();
  engine.state().attributes[param_name_] = value;
  if (save_history_) history_.push_back(value);
}

StateDict StateParamScheduler::state_dict() const {
  StateDict sd = new_state_dict();
  sd.insert("event_index", event_index_);
  sd.insert("param_name", param_name_);
  sd.insert("save_history", save_history_);
  return sd;
}

void StateParamScheduler::load_state_dict(const StateDict& sd) {
  const scheduler_detail::BaseState base = scheduler_detail::read_base_state(sd, who(), param_name_);
  event_index_ = base.event_index;
  save_history_ = base.save_history;
}

std::vector<std::pair<int64_t, Value>> StateParamScheduler::simulate_values(int64_t num_events) {
  KINDLING_CHECK(num_events >= 0, who(), "::simulate_values: num_events must be >= 0, got ", num_events);
  const int64_t saved = event_index_;
  std::vector<std::pair<int64_t, Value>> out;
  for (int64_t i = 0; i < num_events; ++i) {
    event_index_ = i + 1;
    out.emplace_back(i, get_param());
  }
  event_index_ = saved;
  return out;
}

LambdaStateScheduler::LambdaStateScheduler(std::function<Value(int64_t)> lambda, std::string param_name,
                                           bool save_history, bool create_new)
    : StateParamScheduler("LambdaStateScheduler", std::move(param_name), save_history, create_new),
      lambda_(std::move(lambda)) {
  KINDLING_CHECK(static_cast<bool>(lambda_), who(), ": the lambda (event index -> value) is empty");
}

Value LambdaStateScheduler::get_param() const { return lambda_(event_index()); }

PiecewiseLinearStateScheduler::PiecewiseLinearStateScheduler(std::vector<std::pair<int64_t, double>> milestones_values,
                                                             std::string param_name, bool save_history, bool create_new)
    : StateParamScheduler("PiecewiseLinearStateScheduler", std::move(param_name), save_history, create_new),
      points_(std::move(milestones_values)) {
  KINDLING_CHECK(!points_.empty(), who(), ": milestones_values must hold at least one (milestone, value) pair");
  for (std::size_t i = 1; i < points_.size(); ++i) {
    KINDLING_CHECK(points_[i].first >= points_[i - 1].first, who(), ": milestones must not decrease, but ",
                   points_[i].first, " follows ", points_[i - 1].first);
  }
}

Value PiecewiseLinearStateScheduler::get_param() const {
  const int64_t e = event_index();
  if (e < points_.front().first) return points_.front().second;
  // The last point at or before e; past the last point, its value.
  std::size_t i = 0;
  while (i + 1 < points_.size() && points_[i + 1].first <= e) ++i;
  if (i + 1 == points_.size()) return points_.back().second;
  const auto& [m0, v0] = points_[i];
  const auto& [m1, v1] = points_[i + 1];
  return v0 + (v1 - v0) * static_cast<double>(e - m0) / static_cast<double>(m1 - m0);
}

StateDict PiecewiseLinearStateScheduler::state_dict() const {
  StateDict sd = StateParamScheduler::state_dict();
  c10::List<int64_t> milestones;
  c10::List<double> values;
  for (const auto& [m, v] : points_) milestones.push_back(m), values.push_back(v);
  sd.insert("milestones", milestones);
  sd.insert("values", values);
  return sd;
}

ExpStateScheduler::ExpStateScheduler(double initial_value, double gamma, std::string param_name, bool save_history,
                                     bool create_new)
    : ExpStateScheduler("ExpStateScheduler", initial_value, gamma, std::move(param_name), save_history, create_new) {}

ExpStateScheduler::ExpStateScheduler(const char* class_name, double initial_value, double gamma, std::string param_name,
                                     bool save_history, bool create_new)
    : StateParamScheduler(class_name, std::move(param_name), save_history, create_new),
      initial_value_(initial_value),
      gamma_(gamma) {}

Value ExpStateScheduler::get_param() const {
  return initial_value_ * std::pow(gamma_, static_cast<double>(event_index()));
}

StateDict ExpStateScheduler::state_dict() const {
  StateDict sd = StateParamScheduler::state_dict();
  sd.insert("initial_value", initial_value_);
  sd.insert("gamma", gamma_);
  return sd;
}

StepStateScheduler::StepStateScheduler(double initial_value, double gamma, int64_t step_size, std::string param_name,
                                       bool save_history, bool create_new)
    : ExpStateScheduler("StepStateScheduler", initial_value, gamma, std::move(param_name), save_history, create_new),
      step_size_(step_size) {
  KINDLING_CHECK(step_size >= 1, who(), ": step_size must be at least 1, got ", step_size);
}

Value StepStateScheduler::get_param() const {
  return initial_value_ * std::pow(gamma_, static_cast<double>(event_index() / step_size_));
}

StateDict StepStateScheduler::state_dict() const {
  StateDict sd = ExpStateScheduler::state_dict();
  sd.insert("step_size", step_size_);
  return sd;
}

MultiStepStateScheduler::MultiStepStateScheduler(double initial_value, double gamma, std::vector<int64_t> milestones,
                                                 std::string param_name, bool save_history, bool create_new)
    : ExpStateScheduler("MultiStepStateScheduler", initial_value, gamma, std::move(param_name), save_history,
                        create_new),
      milestones_(std::move(milestones)) {
  for (std::size_t i = 1; i < milestones_.size(); ++i) {
    KINDLING_CHECK(milestones_[i] > milestones_[i - 1], who(), ": milestones must increase, but ", milestones_[i],
                   " follows ", milestones_[i - 1]);
  }
}

Value MultiStepStateScheduler::get_param() const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), event_index()) - milestones_.begin();
  return initial_value_ * std::pow(gamma_, static_cast<double>(passed));
}

StateDict MultiStepStateScheduler::state_dict() const {
  StateDict sd = ExpStateScheduler::state_dict();
  sd.insert("milestones", c10::List<int64_t>(milestones_));
  return sd;
}

}  // namespace handlers
}  // namespace kindling
