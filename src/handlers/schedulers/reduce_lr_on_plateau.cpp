// ReduceLROnPlateauScheduler: torch's ReduceLROnPlateau rule over an engine's metric, as a
// ParamScheduler of "lr" (ignite's wrapper), with torch's state_dict keys.
#include "kindling/handlers/schedulers/reduce_lr_on_plateau.h"

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "handlers/schedulers/param_scheduler_detail.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {

namespace {

constexpr const char* kPlateauWho = "kindling::handlers::ReduceLROnPlateauScheduler";

// The rule's settings from the options, with one min_lr per parameter group of the optimizer.
ReduceLROnPlateauScheduler::Rule plateau_rule(const ReduceLROnPlateauOptions& o, std::size_t groups) {
  ReduceLROnPlateauScheduler::Rule rule;
  rule.mode = o.mode();
  rule.threshold_mode = o.threshold_mode();
  rule.factor = o.factor();
  rule.threshold = o.threshold();
  rule.eps = o.eps();
  rule.patience = o.patience();
  rule.cooldown = o.cooldown();
  KINDLING_CHECK(o.min_lr().size() <= 1 || o.min_lr().size() == groups, kPlateauWho, ": expected ", groups,
                 " min_lrs (one per parameter group of the optimizer), got ", o.min_lr().size(),
                 "; pass one min_lr for every group or one per group");
  rule.min_lrs =
      o.min_lr().size() == groups ? o.min_lr() : std::vector<double>(groups, o.min_lr().empty() ? 0.0 : o.min_lr()[0]);
  return rule;
}

// Throws kindling::UsageError (as torch and ignite do, with what to do) for settings the rule cannot use.
void check_plateau_rule(const ReduceLROnPlateauScheduler::Rule& r, const std::string& where) {
  KINDLING_CHECK(r.mode == "min" || r.mode == "max", kPlateauWho, where, ": mode '", r.mode,
                 "' is unknown; use \"min\" (lower is better, e.g. a loss) or \"max\" (e.g. an accuracy)");
  KINDLING_CHECK(r.threshold_mode == "rel" || r.threshold_mode == "abs", kPlateauWho, where, ": threshold_mode '",
                 r.threshold_mode, "' is unknown; use \"rel\" (a fraction of the best) or \"abs\" (metric units)");
  KINDLING_CHECK(r.factor >= 0 && r.factor < 1, kPlateauWho, where, ": factor should be < 1.0 (and >= 0), got ",
                 r.factor, "; the lr is multiplied by it, e.g. 0.1 divides it by 10");
  KINDLING_CHECK(r.patience >= 0, kPlateauWho, where, ": patience should be >= 0, got ", r.patience,
                 "; pass the number of calls without improvement to tolerate before a reduction (torch's default "
                 "10; 0 reduces at the first bad call)");
  KINDLING_CHECK(r.cooldown >= 0, kPlateauWho, where, ": cooldown should be >= 0, got ", r.cooldown,
                 "; pass the number of calls after a reduction during which bad calls are not counted (default 0)");
  KINDLING_CHECK(r.threshold >= 0, kPlateauWho, where, ": threshold should be >= 0, got ", r.threshold,
                 "; pass how much better than the best a value must be to count as an improvement (default 1e-4; 0 "
                 "for any improvement)");
  KINDLING_CHECK(r.eps >= 0, kPlateauWho, where, ": eps should be >= 0, got ", r.eps,
                 "; pass the smallest lr change a reduction makes (default 1e-8; 0 always reduces)");
  for (std::size_t g = 0; g < r.min_lrs.size(); ++g) {
    KINDLING_CHECK(r.min_lrs[g] >= 0, kPlateauWho, where, ": min_lr of parameter group ", g, " is ", r.min_lrs[g],
                   ", expected >= 0; pass the lowest lr a reduction may reach (default 0)");
  }
}

double mode_worse_of(const std::string& mode) {
  return mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

std::string plateau_metric_names(const engine::ValueMap& metrics) {
  std::string out;
  for (const auto& kv : metrics) out += (out.empty() ? "'" : ", '") + kv.first + "'";
  return out.empty() ? "none" : out;
}

}  // namespace

ReduceLROnPlateauScheduler::ReduceLROnPlateauScheduler(torch::optim::Optimizer& optimizer, std::string metric_name,
                                                       const ReduceLROnPlateauOptions& options)
    : ParamScheduler("ReduceLROnPlateauScheduler", optimizer, "lr", options.save_history(),
                     options.param_group_index()),
      metric_name_(std::move(metric_name)),
      rule_(plateau_rule(options, optimizer.param_groups().size())) {
  KINDLING_CHECK(!metric_name_.empty(), who(), ": metric_name is empty; pass the name the metric is attached under");
  check_plateau_rule(rule_, "");
  best_ = mode_worse_of(rule_.mode);
}

void ReduceLROnPlateauScheduler::operator()(engine::Engine& engine) {
  const engine::ValueMap& metrics = engine.state().metrics;
  const auto it = metrics.find(metric_name_);
  KINDLING_CHECK(it != metrics.end(), who(), ": the metric '", metric_name_, "' is not in ", engine.name,
                 ".state().metrics, which holds ", plateau_metric_names(metrics),
                 "; attach the metric to this engine under that name, and the scheduler to an event after it is "
                 "computed (e.g. the evaluator's COMPLETED)");
  const engine::Value& v = it->second;
  const bool scalar = v.is_number() || (v.is_tensor() && v.tensor().numel() == 1);
  KINDLING_CHECK(scalar, who(), ": the metric '", metric_name_, "' holds ", v.to_string(),
                 ", expected a number; monitor a scalar metric");
  step(v.number());
}

engine::HandlerHandle ReduceLROnPlateauScheduler::attach(engine::Engine& engine, const engine::EventsList& event) {
  std::shared_ptr<ReduceLROnPlateauScheduler> self = engine::keep_alive(*this, who());
  return engine.add_event_handler(event, [self](engine::Engine& e) { (*self)(e); });
}

// torch's ReduceLROnPlateau.step; ParamScheduler::step() then records the lrs and counts the event.
void ReduceLROnPlateauScheduler::step(double metric_value) {
  ++last_epoch_;
  if (is_better(metric_value)) {
    best_ = metric_value;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {  // in cool-down: bad calls do not count
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > rule_.patience) {
    reduce_lrs();
    cooldown_counter_ = rule_.cooldown;
    num_bad_epochs_ = 0;
  }
  metric_given_ = true;
  ParamScheduler::step();  // calls advance() below, which is allowed from here only
}

bool ReduceLROnPlateauScheduler::is_better(double v) const {
  const bool rel = rule_.threshold_mode == "rel";
  if (rule_.mode == "min") return v < (rel ? best_ * (1 - rule_.threshold) : best_ - rule_.threshold);
  return v > (rel ? best_ * (1 + rule_.threshold) : best_ + rule_.threshold);
}

void ReduceLROnPlateauScheduler::reduce_lrs() {
  for (std::size_t g : group_indices()) {
    const double old_lr = scheduler_detail::read_option(optimizer(), g, "lr");
    const double new_lr = std::max(old_lr * rule_.factor, rule_.min_lrs[g]);
    if (old_lr - new_lr > rule_.eps) scheduler_detail::write_option(optimizer(), g, "lr", new_lr);
  }
}

std::vector<double> ReduceLROnPlateauScheduler::get_param() { return current_values(); }

void ReduceLROnPlateauScheduler::advance() {
  // step(double) has applied the rule; an advance from anywhere else has no metric.
  KINDLING_CHECK(metric_given_, who(),
                 ": stepped without a metric value (through ParamScheduler::step(), which has none); call "
                 "step(value), operator()(engine) or attach(evaluator) of ReduceLROnPlateauScheduler itself");
  metric_given_ = false;
  ParamScheduler::advance();
}

StateDict ReduceLROnPlateauScheduler::state_dict() const {
  StateDict sd = ParamScheduler::state_dict();
  sd.insert("metric_name", metric_name_);
  StateDict s = new_state_dict();
  s.insert("factor", rule_.factor);
  s.insert("min_lrs", rule_.min_lrs);
  s.insert("patience", rule_.patience);
  s.insert("cooldown", rule_.cooldown);
  s.insert("cooldown_counter", cooldown_counter_);
  s.insert("mode", rule_.mode);
  s.insert("threshold", rule_.threshold);
  s.insert("threshold_mode", rule_.threshold_mode);
  s.insert("best", best_);
  s.insert("num_bad_epochs", num_bad_epochs_);
  s.insert("mode_worse", mode_worse_of(rule_.mode));
  s.insert("eps", rule_.eps);
  s.insert("last_epoch", last_epoch_);
  sd.insert("scheduler", s);
  return sd;
}

void ReduceLROnPlateauScheduler::load_state_dict(const StateDict& sd) {
  using scheduler_detail::read_double;
  using scheduler_detail::read_int;
  const std::string w = who();
  const c10::IValue name = scheduler_detail::require(sd, "metric_name", w);
  KINDLING_CHECK(name.isString() && !name.toStringRef().empty(), w, ": state attribute 'metric_name' holds a ",
                 name.tagKind(), ", expected a non-empty string");
  const c10::IValue inner = scheduler_detail::require(sd, "scheduler", w);
  KINDLING_CHECK(inner.isGenericDict(), w, ": state attribute 'scheduler' holds a ", inner.tagKind(),
                 ", expected torch's ReduceLROnPlateau state (a dict)");
  const StateDict s = inner.toGenericDict();
  auto read_string = [&](const char* key) {
    const c10::IValue v = scheduler_detail::require(s, key, w + " (in 'scheduler')");
    KINDLING_CHECK(v.isString(), w, ": 'scheduler' attribute '", key, "' holds a ", v.tagKind(), ", expected a string");
    return v.toStringRef();
  };
  Rule rule;
  rule.mode = read_string("mode");
  rule.threshold_mode = read_string("threshold_mode");
  rule.factor = read_double(s, "factor", w);
  rule.threshold = read_double(s, "threshold", w);
  rule.eps = read_double(s, "eps", w);
  rule.patience = read_int(s, "patience", w);
  rule.cooldown = read_int(s, "cooldown", w);
  rule.min_lrs = scheduler_detail::read_list<double>(s, "min_lrs", w);
  const std::size_t groups = optimizer().param_groups().size();
  KINDLING_CHECK(rule.min_lrs.size() == groups, w, ": the state_dict has ", rule.min_lrs.size(),
                 " min_lrs but the optimizer has ", groups,
                 " parameter groups; load the state of a scheduler of this "
                 "optimizer");
  check_plateau_rule(rule, " (in the state_dict)");
  const double best = read_double(s, "best", w);
  const int64_t bad = read_int(s, "num_bad_epochs", w), cooldown_counter = read_int(s, "cooldown_counter", w);
  const int64_t last_epoch = read_int(s, "last_epoch", w);
  KINDLING_CHECK(bad >= 0 && cooldown_counter >= 0 && last_epoch >= 0, w, ": the state_dict's num_bad_epochs (", bad,
                 "), cooldown_counter (", cooldown_counter, ") and last_epoch (", last_epoch, ") should be >= 0");
  ParamScheduler::load_state_dict(sd);  // checks its own keys; throws before anything changes
  metric_name_ = name.toStringRef();
  rule_ = std::move(rule);
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown_counter;
  last_epoch_ = last_epoch;
}

SimulatedValues ReduceLROnPlateauScheduler::simulate_values(int64_t num_events,
                                                            const std::vector<double>& metric_values, double init_lr,
                                                            const ReduceLROnPlateauOptions& options) {
  const std::string who = std::string(kPlateauWho) + "::simulate_values";
  KINDLING_CHECK(static_cast<int64_t>(metric_values.size()) == num_events, who,
                 ": the length of metric_values should be equal to num_events: ", metric_values.size(),
                 " != ", num_events);
  KINDLING_CHECK(!options.param_group_index() || *options.param_group_index() == 0, who,
                 ": the simulation has one parameter group; param_group_index should be unset or 0, got ",
                 *options.param_group_index());
  torch::optim::SGD fake(std::vector<at::Tensor>{at::zeros({1}).requires_grad_()}, torch::optim::SGDOptions(init_lr));
  ReduceLROnPlateauScheduler s(fake, "metric", ReduceLROnPlateauOptions(options).save_history(false));
  SimulatedValues out;
  for (int64_t i = 0; i < num_events; ++i) {
    s.step(metric_values[static_cast<std::size_t>(i)]);
    out.emplace_back(i, s.current_values().front());
  }
  return out;
}

}  // namespace handlers
}  // namespace kindling
