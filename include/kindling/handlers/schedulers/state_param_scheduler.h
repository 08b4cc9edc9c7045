#pragma once
/// \file
/// Schedulers of a value in the engine's state instead of an optimizer's option (ignite's
/// StateParamScheduler family): each event sets engine.state().attributes[param_name] to the
/// schedule's value for that event, for a process function or handler that reads it (a loss
/// weight, a temperature, a curriculum level). LambdaStateScheduler, PiecewiseLinearStateScheduler,
/// ExpStateScheduler, StepStateScheduler and MultiStepStateScheduler.
///
/// \code
///   auto beta = std::make_shared<kindling::handlers::PiecewiseLinearStateScheduler>(
///       std::vector<std::pair<int64_t, double>>{{0, 0.0}, {100, 1.0}}, "kl_weight", false, true);
///   beta->attach(trainer, kindling::engine::Events::ITERATION_COMPLETED);
///   // in the process function: e.state().attributes.at("kl_weight").number()
/// \endcode
///
/// Ranks: local; every rank runs its own schedule (the same on every rank). event_index counts
/// the events this scheduler saw; state_dict() saves it (ignite's keys) so that a resumed run
/// continues the schedule.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/engine/value.h"
#include "kindling/export.h"

namespace kindling {
namespace handlers {

/// Base of the state schedulers (ignite's StateParamScheduler).
class KINDLING_API StateParamScheduler : public std::enable_shared_from_this<StateParamScheduler> {
 public:
  virtual ~StateParamScheduler();
  StateParamScheduler(const StateParamScheduler&) = delete;
  StateParamScheduler& operator=(const StateParamScheduler&) = delete;

  /// The value at event_index() (a number, or a tensor for a schedule of several values).
  virtual engine::Value get_param() const = 0;
  /// Sets the attribute at `event` of `engine` (every ITERATION_COMPLETED unless given); the
  /// engine keeps this scheduler alive. Throws kindling::UsageError unless the scheduler is
  /// owned by a std::shared_ptr, or when the attribute already exists and create_new was asked
  /// (another handler owns that name: choose another). Without create_new, a missing attribute
  /// is created with a warning in the log (ignite's).
  engine::HandlerHandle attach(engine::Engine& engine,
                               const engine::EventsList& event = engine::Events::ITERATION_COMPLETED);
  /// ignite's __call__: moves to the next event and sets the attribute to get_param() (and
  /// appends it to param_history() with save_history). Local.
  void operator()(engine::Engine& engine);

  int64_t event_index() const { return event_index_; }
  const std::string& param_name() const { return param_name_; }
  bool save_history() const { return save_history_; }
  /// The values set while save_history was on, one per event (ignite's
  /// engine.state.param_history[param_name]).
  const std::vector<engine::Value>& param_history() const { return history_; }

  /// ignite's keys "event_index", "param_name", "save_history" and the subclass's own. Local.
  virtual StateDict state_dict() const;
  /// Restores a state_dict(). Throws kindling::UsageError, changing nothing, for a missing key,
  /// a value of the wrong type, or the state of a scheduler of another param_name.
  virtual void load_state_dict(const StateDict& state_dict);
  /// (i, value at event i + 1) for the first `num_events` events (ignite's simulate_values), on
  /// this scheduler's schedule; its own state is unchanged. Throws kindling::UsageError for
  /// num_events < 0.
  std::vector<std::pair<int64_t, engine::Value>> simulate_values(int64_t num_events);

 protected:
  /// `class_name` names the class in messages. Throws kindling::UsageError for an empty param_name.
  StateParamScheduler(const char* class_name, std::string param_name, bool save_history, bool create_new);
  /// "kindling::handlers::<Class>".
  std::string who() const;

 private:
  const char* class_name_;
  std::string param_name_;
  bool save_history_;
  bool create_new_;
  int64_t event_index_ = 0;
  std::vector<engine::Value> history_;
};

/// The value of a function of the event index.
class KINDLING_API LambdaStateScheduler : public StateParamScheduler {
 public:
  /// Throws kindling::UsageError when `lambda` is empty or param_name is.
  LambdaStateScheduler(std::function<engine::Value(int64_t event_index)> lambda, std::string param_name,
                       bool save_history = false, bool create_new = false);
  engine::Value get_param() const override;

 private:
  std::function<engine::Value(int64_t)> lambda_;
};

/// Linear between (milestone, value) points; the first value before the first milestone, the
/// last after the last.
class KINDLING_API PiecewiseLinearStateScheduler : public StateParamScheduler {
 public:
  /// Throws kindling::UsageError for no points, or milestones that decrease (naming both).
  PiecewiseLinearStateScheduler(std::vector<std::pair<int64_t, double>> milestones_values, std::string param_name,
                                bool save_history = false, bool create_new = false);
  engine::Value get_param() const override;
  /// Adds "milestones" and "values" to the base's keys.
  StateDict state_dict() const override;

 private:
  std::vector<std::pair<int64_t, double>> points_;
};

/// initial_value * gamma^event_index.
class KINDLING_API ExpStateScheduler : public StateParamScheduler {
 public:
  ExpStateScheduler(double initial_value, double gamma, std::string param_name, bool save_history = false,
                    bool create_new = false);
  engine::Value get_param() const override;
  /// Adds "initial_value" and "gamma" to the base's keys.
  StateDict state_dict() const override;

 protected:
  /// For the schedules built on this one: `class_name` names the class in messages.
  ExpStateScheduler(const char* class_name, double initial_value, double gamma, std::string param_name,
                    bool save_history, bool create_new);
  double initial_value_, gamma_;
};

/// initial_value * gamma^(event_index / step_size), integer division.
class KINDLING_API StepStateScheduler : public ExpStateScheduler {
 public:
  /// Throws kindling::UsageError for step_size < 1.
  StepStateScheduler(double initial_value, double gamma, int64_t step_size, std::string param_name,
                     bool save_history = false, bool create_new = false);
  engine::Value get_param() const override;
  /// Adds "step_size" to ExpStateScheduler's keys.
  StateDict state_dict() const override;

 private:
  int64_t step_size_;
};

/// initial_value * gamma^(the number of milestones <= event_index).
class KINDLING_API MultiStepStateScheduler : public ExpStateScheduler {
 public:
  /// Throws kindling::UsageError for milestones that are not increasing.
  MultiStepStateScheduler(double initial_value, double gamma, std::vector<int64_t> milestones, std::string param_name,
                          bool save_history = false, bool create_new = false);
  engine::Value get_param() const override;
  /// Adds "milestones" to ExpStateScheduler's keys.
  StateDict state_dict() const override;

 private:
  std::vector<int64_t> milestones_;
};

}  // namespace handlers
}  // namespace kindling
