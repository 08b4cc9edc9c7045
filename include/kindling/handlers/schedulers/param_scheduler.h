#pragma once
/// \file
/// Parameter schedulers (ignite's param_scheduler): handlers that set an optimizer's "lr",
/// "momentum" or "weight_decay" at each event they are attached to.
///
/// \code
///   auto cosine = std::make_shared<kindling::handlers::CosineAnnealingScheduler>(optimizer, "lr", 0.1, 0.001, 500);
///   auto scheduler = kindling::handlers::create_lr_scheduler_with_warmup(cosine, 0.0, 100);  // warm-up, then cosine
///   scheduler->attach(trainer);  // Events::ITERATION_STARTED, as ignite recommends
/// \endcode
///
/// Values are absolute: a scheduler sets what it computes whatever the optimizer held (except
/// LRScheduler, whose LibTorch schedulers scale the current learning rate). "lr" goes through
/// OptimizerOptions::set_lr (every optimizer); "momentum" exists for SGD and RMSprop;
/// "weight_decay" for SGD, Adam, AdamW, RMSprop and Adagrad.
///
/// History: with save_history a scheduler keeps the values it set in param_history() (one
/// entry per event, one value per parameter group it sets), where ignite appends them to
/// engine.state.param_history[name]. The history is not part of state_dict() (nor is it in ignite).
///
/// Ranks: everything here is local. Each rank's scheduler sets its own optimizer and nothing
/// communicates; attach the same schedulers on every rank to keep the replicas' values equal.

#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace handlers {

/// (event index, value of the first parameter group set) after each simulated event.
using SimulatedValues = std::vector<std::pair<int64_t, double>>;

/// Base of the schedulers (ignite's ParamScheduler). Subclasses give get_param(); step() sets
/// it on the optimizer's groups and moves to the next event.
class KINDLING_API ParamScheduler : public std::enable_shared_from_this<ParamScheduler> {
 public:
  /// Schedules `param_name` of `optimizer`'s group `param_group_index`, or of every group when
  /// unset. The optimizer must outlive the scheduler. Throws kindling::UsageError for a name the
  /// optimizer's options do not have (the message lists the supported ones) or an index out of range.
  ParamScheduler(torch::optim::Optimizer& optimizer, std::string param_name, bool save_history = false,
                 std::optional<int64_t> param_group_index = std::nullopt);
  virtual ~ParamScheduler();
  ParamScheduler(const ParamScheduler&) = delete;
  ParamScheduler& operator=(const ParamScheduler&) = delete;

  /// The value for the current event_index(): one value for every group set, or one per group.
  virtual std::vector<double> get_param() = 0;
  /// ignite's __call__: sets this event's value, appends it to param_history() when save_history,
  /// then moves to the next event. Throws kindling::UsageError when get_param() gives neither one
  /// value nor one per group. Local.
  void step();
  /// step(); the engine is not needed (the history is kept here). For engine.on(event, ...).
  /// Virtual: ReduceLROnPlateauScheduler's reads its metric from `engine`, also when called
  /// through a ParamScheduler.
  virtual void operator()(engine::Engine& engine);
  /// Runs step() on `event` (ITERATION_STARTED unless given); the engine keeps this scheduler
  /// alive. Throws kindling::UsageError unless the scheduler is owned by a std::shared_ptr, and
  /// for a scheduler that needs_metric() (a ReduceLROnPlateauScheduler reached through a
  /// std::shared_ptr<ParamScheduler>, e.g. setup_common_training_handlers' lr_scheduler): this
  /// attach would step it without its metric; the message says to call its own attach.
  engine::HandlerHandle attach(engine::Engine& engine,
                               const engine::EventsList& event = engine::Events::ITERATION_STARTED);
  /// Whether each step needs a metric value that step() does not have (true for
  /// ReduceLROnPlateauScheduler): ParamScheduler::attach and ConcatScheduler, which step
  /// without one, refuse such a scheduler when they are given it. Does not throw.
  virtual bool needs_metric() const { return false; }
  /// step() without the history: what ConcatScheduler calls on the scheduler it runs.
  virtual void advance();

  int64_t event_index() const { return event_index_; }
  const std::string& param_name() const { return param_name_; }
  std::optional<int64_t> param_group_index() const { return param_group_index_; }
  torch::optim::Optimizer& optimizer() const { return optimizer_; }
  bool save_history() const { return save_history_; }
  void set_save_history(bool save_history) { save_history_ = save_history; }
  /// The values set by step() while save_history was on: per event, one per group set.
  const std::vector<std::vector<double>>& param_history() const { return history_; }
  /// Indices of the optimizer's groups the next event sets.
  virtual std::vector<std::size_t> group_indices() const;
  /// The scheduled parameter's value now in each of group_indices(). Does not throw.
  std::vector<double> current_values() const;
  /// "kindling::handlers::<Class>", for messages.
  std::string who() const;

  /// ignite's keys: "event_index", "param_name", "save_history", "param_group_index" (None when
  /// unset), plus each subclass's own. Local.
  virtual StateDict state_dict() const;
  /// Restores a state_dict(). Throws kindling::UsageError, changing nothing, for a missing key, a
  /// value of the wrong type, or the state of another param_name / param_group_index.
  virtual void load_state_dict(const StateDict& state_dict);

  /// Builds a scheduler with `make` on a fresh one-parameter SGD (lr 0.01, as ignite's fake
  /// optimizer), steps it `num_events` times and returns (i, value) after each step. Throws
  /// kindling::UsageError for num_events < 0 or a null scheduler.
  static SimulatedValues simulate_values(
      int64_t num_events, const std::function<std::shared_ptr<ParamScheduler>(torch::optim::Optimizer&)>& make);

 protected:
  /// For subclasses: `class_name` names the class in messages ("CosineAnnealingScheduler").
  ParamScheduler(const char* class_name, torch::optim::Optimizer& optimizer, std::string param_name, bool save_history,
                 std::optional<int64_t> param_group_index);

  int64_t event_index_ = 0;

 private:
  const char* class_name_;
  torch::optim::Optimizer& optimizer_;
  std::string param_name_;
  bool save_history_;
  std::optional<int64_t> param_group_index_;
  std::vector<std::vector<double>> history_;
};

/// Keyword options of the cyclical schedulers (ignite's names and defaults); chain the setters.
class KINDLING_API CyclicalOptions {
 public:
  /// Factor of cycle_size (and warmup_duration) at the end of each cycle (> 0; default 1).
  KINDLING_ARG(double, cycle_mult) = 1.0;

  /// Factor of start_value at the end of each cycle (default 1).
  KINDLING_ARG(double, start_value_mult) = 1.0;

  /// Factor of end_value at the end of each cycle (default 1).
  KINDLING_ARG(double, end_value_mult) = 1.0;

  /// Events of linear warm-up after each cycle, from end_value back to the next start_value (>= 0; default 0).
  KINDLING_ARG(int64_t, warmup_duration) = 0;

  /// LinearCyclicalScheduler only: go from start to end over the whole cycle, not there and back.
  KINDLING_ARG(bool, monotonic) = false;

  /// Keep the values set in param_history() (default false).
  KINDLING_ARG(bool, save_history) = false;

  /// Set only this parameter group (default: every group).
  KINDLING_ARG(std::optional<int64_t>, param_group_index);
};

/// ignite's CyclicalScheduler: cycles of cycle_size events from start_value (through end_value),
/// each followed by warmup_duration events going linearly from end_value to the next start_value.
/// At the end of a cycle start_value, end_value, cycle_size and warmup_duration take their factors.
class KINDLING_API CyclicalScheduler : public ParamScheduler {
 public:
  /// In a cycle: value_at(event_index / cycle_size); in the warm-up: end + (start - end) * progress.
  std::vector<double> get_param() override;
  /// Starts the next cycle when this one (with its warm-up) is over, then sets the value. Throws
  /// kindling::UsageError when cycle_mult has shrunk cycle_size to 0.
  void advance() override;
  /// Adds ignite's "start_value", "end_value", "cycle_size", "cycle_mult", "cycle",
  /// "start_value_mult", "end_value_mult", "warmup_duration", "total_cycle_size".
  StateDict state_dict() const override;
  /// As ParamScheduler's; also throws for cycle_size < 1 or warmup_duration < 0 in the state.
  void load_state_dict(const StateDict& state_dict) override;

  double start_value() const { return start_value_; }
  double end_value() const { return end_value_; }
  int64_t cycle_size() const { return cycle_size_; }
  int64_t warmup_duration() const { return warmup_duration_; }
  /// Cycles completed so far.
  int64_t cycle() const { return cycle_; }

 protected:
  /// Throws kindling::UsageError for cycle_size < 2 (ignite's rule), cycle_mult <= 0 or
  /// warmup_duration < 0, and as ParamScheduler's constructor.
  CyclicalScheduler(const char* class_name, torch::optim::Optimizer& optimizer, std::string param_name,
                    double start_value, double end_value, int64_t cycle_size, const CyclicalOptions& options);
  /// The value at `progress` (event_index / cycle_size, in [0, 1]) of the current cycle.
  virtual double value_at(double progress) const = 0;

  double start_value_, end_value_;
  int64_t cycle_size_;
  double cycle_mult_;
  int64_t cycle_ = 0;
  double start_value_mult_, end_value_mult_;
  int64_t warmup_duration_, total_cycle_size_;
};

/// ignite's LinearCyclicalScheduler: linear from start_value to end_value over half a cycle and
/// back over the other half; with monotonic, start to end over the whole cycle.
class KINDLING_API LinearCyclicalScheduler : public CyclicalScheduler {
 public:
  /// Throws kindling::UsageError as CyclicalScheduler, and for warmup_duration > 0 without
  /// monotonic (ignite's rule: the warm-up is for monotonic cycles).
  LinearCyclicalScheduler(torch::optim::Optimizer& optimizer, std::string param_name, double start_value,
                          double end_value, int64_t cycle_size, const CyclicalOptions& options = CyclicalOptions());
  /// The constructor's arguments but the optimizer (save_history ignored); see ParamScheduler's.
  static SimulatedValues simulate_values(int64_t num_events, const std::string& param_name, double start_value,
                                         double end_value, int64_t cycle_size,
                                         const CyclicalOptions& options = CyclicalOptions());

 protected:
  double value_at(double progress) const override;

 private:
  bool monotonic_;
};

/// ignite's CosineAnnealingScheduler: start + (end - start) * (1 - cos(pi * progress)) / 2 over
/// each cycle (the first half of a cosine wave, Smith 2017).
class KINDLING_API CosineAnnealingScheduler : public CyclicalScheduler {
 public:
  /// Throws kindling::UsageError as CyclicalScheduler, and for options.monotonic().
  CosineAnnealingScheduler(torch::optim::Optimizer& optimizer, std::string param_name, double start_value,
                           double end_value, int64_t cycle_size, const CyclicalOptions& options = CyclicalOptions());
  /// The constructor's arguments but the optimizer (save_history ignored); see ParamScheduler's.
  static SimulatedValues simulate_values(int64_t num_events, const std::string& param_name, double start_value,
                                         double end_value, int64_t cycle_size,
                                         const CyclicalOptions& options = CyclicalOptions());

 protected:
  double value_at(double progress) const override;
};

/// ignite's PiecewiseLinear: values[0] until the first milestone, linear between consecutive
/// (milestone, value) pairs, values.back() from the last milestone on.
class KINDLING_API PiecewiseLinear : public ParamScheduler {
 public:
  /// Throws kindling::UsageError for no pair, or a milestone smaller than the one before it
  /// (equal milestones make a jump), and as ParamScheduler's constructor.
  PiecewiseLinear(torch::optim::Optimizer& optimizer, std::string param_name,
                  std::vector<std::pair<int64_t, double>> milestones_values, bool save_history = false,
                  std::optional<int64_t> param_group_index = std::nullopt);
  std::vector<double> get_param() override;
  /// Adds ignite's "values", "milestones" and "_index".
  StateDict state_dict() const override;
  /// As ParamScheduler's; also throws for milestones and values of different lengths or unsorted.
  void load_state_dict(const StateDict& state_dict) override;
  /// The constructor's arguments but the optimizer; see ParamScheduler's.
  static SimulatedValues simulate_values(int64_t num_events, const std::string& param_name,
                                         const std::vector<std::pair<int64_t, double>>& milestones_values);

 private:
  std::vector<int64_t> milestones_;
  std::vector<double> values_;
  std::size_t index_ = 0;  // the segment last used (ignite's _index)
};

/// ignite's ConcatScheduler: runs schedulers[0] for durations[0] events, then schedulers[1] for
/// durations[1], ..., the last one for ever. Each scheduler goes on from its own event index;
/// event_index() counts the ConcatScheduler's own events (ignite's stays 0).
class KINDLING_API ConcatScheduler : public ParamScheduler {
 public:
  /// Throws kindling::UsageError for fewer than 2 schedulers or a null one, durations.size() !=
  /// schedulers.size() - 1, a duration < 1, or schedulers of different optimizers or param_names.
  ConcatScheduler(std::vector<std::shared_ptr<ParamScheduler>> schedulers, std::vector<int64_t> durations,
                  bool save_history = false);
  /// get_param() of the scheduler that sets the next event's value.
  std::vector<double> get_param() override;
  /// Switches to the next scheduler when the current one's duration is over, then advances it.
  void advance() override;
  /// The groups of the scheduler that ran last (of the first one before any event).
  std::vector<std::size_t> group_indices() const override;
  /// Adds ignite's "_current_duration", "durations", "_scheduler_index" and "schedulers" (a list
  /// of the schedulers' state dicts).
  StateDict state_dict() const override;
  /// Restores every scheduler too. Throws kindling::UsageError, changing nothing, without
  /// "schedulers", with another number of them, or as the schedulers' own load_state_dict.
  void load_state_dict(const StateDict& state_dict) override;
  /// Values a ConcatScheduler of these schedulers would set; the schedulers' states and the
  /// optimizer's values are restored afterwards. Throws as the constructor.
  static SimulatedValues simulate_values(int64_t num_events,
                                         const std::vector<std::shared_ptr<ParamScheduler>>& schedulers,
                                         const std::vector<int64_t>& durations);

  const std::vector<std::shared_ptr<ParamScheduler>>& schedulers() const { return schedulers_; }
  const std::vector<int64_t>& durations() const { return durations_; }
  /// Which scheduler runs now.
  std::size_t scheduler_index() const { return scheduler_index_; }

 private:
  void setup();
  std::vector<std::shared_ptr<ParamScheduler>> schedulers_;
  std::vector<int64_t> durations_;
  std::size_t scheduler_index_ = 0;
  int64_t current_duration_ = 0;
};

/// ignite's LRScheduler: runs a LibTorch scheduler (torch::optim::StepLR, or your subclass of
/// torch::optim::LRScheduler) as a handler. At each event the learning rates are the scheduler's
/// get_lrs() for its current step count, which then goes up by one (LibTorch's step()).
class KINDLING_API LRScheduler : public ParamScheduler {
 public:
  /// `lr_scheduler` must have been built on `optimizer` (LibTorch does not say which optimizer a
  /// scheduler holds). use_legacy: start one step later, for attaching to ITERATION_COMPLETED
  /// (ignite's use_legacy). Throws kindling::UsageError for a null scheduler.
  LRScheduler(torch::optim::Optimizer& optimizer, std::shared_ptr<torch::optim::LRScheduler> lr_scheduler,
              bool save_history = false, bool use_legacy = false);
  /// The wrapped scheduler's learning rates for its current step count (one per group).
  std::vector<double> get_param() override;
  void advance() override;
  /// Adds "lr_scheduler": {"last_epoch": the wrapped scheduler's step count}. LibTorch's
  /// schedulers scale the current rate: restore the optimizer's state as well.
  StateDict state_dict() const override;
  /// As ParamScheduler's; also throws without "lr_scheduler" / "last_epoch" or for a negative count.
  void load_state_dict(const StateDict& state_dict) override;
  /// The values this wrapper would set; the scheduler's step count and the optimizer's learning
  /// rates are restored afterwards. Throws as the constructor.
  static SimulatedValues simulate_values(int64_t num_events, torch::optim::Optimizer& optimizer,
                                         const std::shared_ptr<torch::optim::LRScheduler>& lr_scheduler);

  const std::shared_ptr<torch::optim::LRScheduler>& lr_scheduler() const { return lr_scheduler_; }
  /// The wrapped scheduler's step count (Python's last_epoch in ignite's use).
  int64_t last_epoch() const;

 private:
  std::shared_ptr<torch::optim::LRScheduler> lr_scheduler_;
};

/// ignite's create_lr_scheduler_with_warmup: a ConcatScheduler of a linear warm-up of "lr" from
/// warmup_start_value to warmup_end_value (unset: each group's current lr) over warmup_duration
/// events, then `lr_scheduler` (same optimizer, param_name "lr"). When lr_scheduler's first
/// value equals warmup_end_value the warm-up ends one event early so that the value is not
/// repeated (ignite's rule). With output_simulated_values, its size() values are simulated into
/// it. Throws kindling::UsageError for warmup_duration < 2, a null or non-"lr" scheduler.
KINDLING_API std::shared_ptr<ConcatScheduler> create_lr_scheduler_with_warmup(
    std::shared_ptr<ParamScheduler> lr_scheduler, double warmup_start_value, int64_t warmup_duration,
    std::optional<double> warmup_end_value = std::nullopt, bool save_history = false,
    SimulatedValues* output_simulated_values = nullptr);
/// The same for a LibTorch scheduler built on `optimizer`: its step count goes up by one and it
/// is wrapped in LRScheduler; when a group's lr differs from the warm-up's end value, one more
/// event sets that lr before the scheduler starts (ignite's rule).
KINDLING_API std::shared_ptr<ConcatScheduler> create_lr_scheduler_with_warmup(
    torch::optim::Optimizer& optimizer, std::shared_ptr<torch::optim::LRScheduler> lr_scheduler,
    double warmup_start_value, int64_t warmup_duration, std::optional<double> warmup_end_value = std::nullopt,
    bool save_history = false, SimulatedValues* output_simulated_values = nullptr);

}  // namespace handlers
}  // namespace kindling
