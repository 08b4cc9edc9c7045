#pragma once
/// \file
/// ReduceLROnPlateauScheduler (ignite's): lowers the learning rate when a metric stops improving,
/// with the rule of torch.optim.lr_scheduler.ReduceLROnPlateau, as a handler of the engine that
/// computes the metric (usually the evaluator's COMPLETED).
///
/// \code
///   namespace kh = kindling::handlers;
///   auto plateau = std::make_shared<kh::ReduceLROnPlateauScheduler>(
///       optimizer, "accuracy", kh::ReduceLROnPlateauOptions().mode("max").factor(0.5).patience(2));
///   plateau->attach(evaluator);  // Events::COMPLETED: reads evaluator.state().metrics["accuracy"]
///   kh::Objects to_save{{"model", kh::stateful(model)}, {"lr_plateau", kh::stateful(*plateau)}};
/// \endcode
///
/// The rule, at each call with the metric's value v (torch's "epoch" is one call):
/// - v is better than the best so far when, for mode "min", v < best * (1 - threshold)
///   (threshold_mode "rel") or v < best - threshold ("abs"); for mode "max", v > best * (1 +
///   threshold) or v > best + threshold. The first value is always better (best starts at +inf
///   for "min", -inf for "max"); a NaN never is.
/// - Better: best = v and the count of bad calls restarts at 0; otherwise it goes up by one.
/// - During a cool-down (cooldown calls after a reduction) bad calls are not counted.
/// - When the count exceeds patience, each scheduled group's lr becomes max(lr * factor,
///   min_lr of the group), unless that changes it by eps or less; the cool-down starts and the
///   count restarts at 0. With patience 2 the lr drops at the third bad call in a row.
///
/// History and state: with save_history the lrs after each call are kept in param_history()
/// (as every kindling scheduler; ignite writes them to trainer.state.param_history, so ignite's
/// `trainer` argument is not needed here). state_dict() holds ParamScheduler's keys,
/// "metric_name", and "scheduler": torch's ReduceLROnPlateau state ("factor", "min_lrs",
/// "patience", "cooldown", "cooldown_counter", "mode", "threshold", "threshold_mode", "best",
/// "num_bad_epochs", "mode_worse", "eps", "last_epoch"), so it goes in a Checkpoint's to_save
/// through stateful(*scheduler).
///
/// Ranks: local, nothing communicates. Every rank decides alike, and its learning rates stay
/// equal to the other ranks', when the metric is the same on every rank: kindling's metrics
/// are (their compute() reduces over the ranks). A value you put in state().metrics yourself
/// must be the same on every rank too, or the replicas' learning rates part ways.

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/handlers/schedulers/param_scheduler.h"
#include "kindling/options.h"

namespace kindling {
namespace handlers {

/// Options of ReduceLROnPlateauScheduler (chain the setters): torch's ReduceLROnPlateau
/// arguments with their defaults, and ignite's save_history / param_group_index.
class KINDLING_API ReduceLROnPlateauOptions {
 public:
  /// "min": a lower metric is better (a loss); "max": a higher one is (an accuracy). Default "min".
  KINDLING_ARG(std::string, mode) = "min";

  /// What a reduction multiplies the lr by, in [0, 1) (default 0.1).
  KINDLING_ARG(double, factor) = 0.1;

  /// Calls without improvement that are tolerated; the next one reduces (>= 0; default 10).
  KINDLING_ARG(int64_t, patience) = 10;

  /// How much better than the best a value must be to count as an improvement (>= 0; default 1e-4).
  KINDLING_ARG(double, threshold) = 1e-4;

  /// "rel": threshold is a fraction of the best; "abs": it is in the metric's units. Default "rel".
  KINDLING_ARG(std::string, threshold_mode) = "rel";

  /// Calls after a reduction during which bad calls are not counted (>= 0; default 0).
  KINDLING_ARG(int64_t, cooldown) = 0;

  /// Lower bound of the lr (>= 0): empty for 0 (the default), one value for every group, or
  /// one per parameter group of the optimizer.
  KINDLING_ARG(std::vector<double>, min_lr);

 public:
  /// The same lower bound for every group.
  ReduceLROnPlateauOptions& min_lr(double value) {
    min_lr_ = {value};
    return *this;
  }

  /// A reduction smaller than this is skipped (>= 0; default 1e-8).
  KINDLING_ARG(double, eps) = 1e-8;

  /// Keep the lrs after each call in param_history() (default false).
  KINDLING_ARG(bool, save_history) = false;

  /// Reduce only this parameter group (default: every group).
  KINDLING_ARG(std::optional<int64_t>, param_group_index);
};

/// ignite's ReduceLROnPlateauScheduler: a ParamScheduler of "lr" whose value is decided by a
/// metric (see the file comment for the rule). Call it with the engine whose state holds the
/// metric: attach(evaluator), or (*scheduler)(evaluator) from a handler of yours.
class KINDLING_API ReduceLROnPlateauScheduler : public ParamScheduler {
 public:
  /// Schedules "lr" of `optimizer` (which must outlive the scheduler) from the metric
  /// `metric_name`. Throws kindling::UsageError for an empty metric name, a mode other than
  /// "min" / "max", a threshold_mode other than "rel" / "abs", a factor outside [0, 1), a
  /// negative patience, cooldown, threshold, eps or min_lr, a min_lr list whose size is neither
  /// 0, 1 nor the number of groups, and as ParamScheduler's constructor (param_group_index).
  ReduceLROnPlateauScheduler(torch::optim::Optimizer& optimizer, std::string metric_name,
                             const ReduceLROnPlateauOptions& options = ReduceLROnPlateauOptions());

  /// Reads engine.state().metrics[metric_name()] and calls step(value) (also when called
  /// through a ParamScheduler). Throws kindling::UsageError when the metric is missing (the
  /// message lists the metrics present) or is not a number. Local.
  void operator()(engine::Engine& engine) override;
  /// Runs operator() on `event` of `engine` (default Events::COMPLETED: attach it to the
  /// evaluator). The engine keeps this scheduler alive; throws kindling::UsageError unless a
  /// std::shared_ptr owns it (make it with std::make_shared). Call it on this class:
  /// ParamScheduler::attach (through a std::shared_ptr<ParamScheduler>) refuses this scheduler
  /// at once, as ConcatScheduler does, since they have no metric to step it with.
  engine::HandlerHandle attach(engine::Engine& engine, const engine::EventsList& event = engine::Events::COMPLETED);
  /// True: each step needs the metric (see ParamScheduler::needs_metric).
  bool needs_metric() const override { return true; }
  /// torch's scheduler.step(metrics): applies the rule to `metric_value`, reduces the lrs when
  /// it says so, appends them to param_history() when save_history, and counts one event.
  /// Does not throw.
  void step(double metric_value);

  /// The lrs now, one per scheduled group: the rule changes them in place.
  std::vector<double> get_param() override;
  /// For ParamScheduler's own step(), which has no metric: throws kindling::UsageError saying
  /// to call step(value) or operator()(engine) instead.
  void advance() override;

  /// ParamScheduler's keys, "metric_name" and "scheduler" (torch's keys; see the file comment).
  StateDict state_dict() const override;
  /// Restores a state_dict(): the counters, the best value and the options saved, like torch's
  /// load_state_dict. Throws kindling::UsageError, changing nothing, for a missing key, a value
  /// of the wrong type, an option the constructor would refuse, or min_lrs for another number
  /// of parameter groups.
  void load_state_dict(const StateDict& state_dict) override;

  /// ignite's simulate_values: the lr after each of metric_values (num_events of them) on a
  /// one-group SGD starting at init_lr, as (event index, lr). Throws kindling::UsageError when
  /// metric_values.size() != num_events, for a param_group_index other than 0, or as the
  /// constructor. Local.
  static SimulatedValues simulate_values(int64_t num_events, const std::vector<double>& metric_values, double init_lr,
                                         const ReduceLROnPlateauOptions& options = ReduceLROnPlateauOptions());

  const std::string& metric_name() const { return metric_name_; }
  /// The best value so far (+inf for "min", -inf for "max" before the first call).
  double best() const { return best_; }
  /// Bad calls counted since the last improvement or reduction (torch's num_bad_epochs).
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  /// Calls left in the current cool-down.
  int64_t cooldown_counter() const { return cooldown_counter_; }
  /// The lower bound of each parameter group of the optimizer (torch's min_lrs).
  const std::vector<double>& min_lrs() const { return rule_.min_lrs; }

  /// The rule's settings, as resolved from the options or a loaded state (one min_lr per group).
  struct Rule {
    std::string mode, threshold_mode;
    double factor = 0.1, threshold = 1e-4, eps = 1e-8;
    int64_t patience = 10, cooldown = 0;
    std::vector<double> min_lrs;
  };

 private:
  bool is_better(double value) const;
  void reduce_lrs();

  std::string metric_name_;
  Rule rule_;
  double best_ = 0;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
  bool metric_given_ = false;  // set by step(double) for the advance() it makes
};

}  // namespace handlers
}  // namespace kindling
