// Parameter schedulers: the base (writing the optimizer's options), the cyclical ones and
// PiecewiseLinear, with ignite's formulas, argument checks and state_dict keys.
#include "kindling/handlers/schedulers/param_scheduler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "handlers/schedulers/param_scheduler_detail.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {

namespace optim = torch::optim;
using scheduler_detail::read_double;
using scheduler_detail::read_int;
using scheduler_detail::read_option;
using scheduler_detail::require;
using scheduler_detail::write_option;

// ---- ParamScheduler ----

ParamScheduler::ParamScheduler(optim::Optimizer& optimizer, std::string param_name, bool save_history,
                               std::optional<int64_t> param_group_index)
    : ParamScheduler("ParamScheduler", optimizer, std::move(param_name), save_history, param_group_index) {}

ParamScheduler::ParamScheduler(const char* class_name, optim::Optimizer& optimizer, std::string param_name,
                               bool save_history, std::optional<int64_t> param_group_index)
    : class_name_(class_name),
      optimizer_(optimizer),
      param_name_(std::move(param_name)),
      save_history_(save_history),
      param_group_index_(param_group_index) {
  const int64_t n = static_cast<int64_t>(optimizer_.param_groups().size());
  KINDLING_CHECK(n > 0, who(), ": the optimizer has no parameter group");
  KINDLING_CHECK(!param_group_index_ || (*param_group_index_ >= 0 && *param_group_index_ < n), who(),
                 ": param_group_index is ", *param_group_index_, " but the optimizer has ", n,
                 " parameter groups; pass an index in [0, ", n, "), or none for every group");
  for (std::size_t g : ParamScheduler::group_indices()) {
    bool ok = false;
    try {
      double unused = 0;
      ok = scheduler_detail::access_option(optimizer_.param_groups()[g].options(), param_name_, nullptr, &unused);
    } catch (const c10::Error& e) {
      KINDLING_CHECK(false, who(), ": the optimizer's options cannot give \"", param_name_, "\" (",
                     e.what_without_backtrace(), "); their class must override get_lr() and set_lr()");
    }
    KINDLING_CHECK(ok, who(), ": param_name \"", param_name_, "\" is not an option of the optimizer's parameter group ",
                   g, "; supported: ", scheduler_detail::kSupportedParams);
  }
}

ParamScheduler::~ParamScheduler() = default;

void ParamScheduler::step() {
  advance();
  if (save_history_) history_.push_back(current_values());
}

void ParamScheduler::operator()(engine::Engine&) { step(); }

engine::HandlerHandle ParamScheduler::attach(engine::Engine& engine, const engine::EventsList& event) {
  // attach() is not virtual (each class has its own default event), so a scheduler that needs
  // a metric can arrive here through a base pointer: refuse it now, not at the first event.
  KINDLING_CHECK(!needs_metric(), who(),
                 ": attached through ParamScheduler::attach (a std::shared_ptr<ParamScheduler>, or "
                 "setup_common_training_handlers' lr_scheduler), which would step it at each event without the "
                 "metric it needs; call its own attach instead, e.g. "
                 "std::static_pointer_cast<ReduceLROnPlateauScheduler>(scheduler)->attach(evaluator), which reads the "
                 "metric at the evaluator's COMPLETED");
  std::shared_ptr<ParamScheduler> self = engine::keep_alive(*this, who());
  return engine.add_event_handler(event, [self](engine::Engine&) { self->step(); });
}

void ParamScheduler::advance() {
  const std::vector<double> value = get_param();
  const std::vector<std::size_t> groups = group_indices();
  KINDLING_CHECK(value.size() == 1 || value.size() == groups.size(), who(), ": size of value is different from the ",
                 "number of parameter groups: get_param() gave ", value.size(), " values for ", groups.size(),
                 " groups; return one value (for every group) or one per group");
  for (std::size_t k = 0; k < groups.size(); ++k) {
    write_option(optimizer_, groups[k], param_name_, value.size() == 1 ? value[0] : value[k]);
  }
  ++event_index_;
}

std::vector<std::size_t> ParamScheduler::group_indices() const {
  if (param_group_index_) return {static_cast<std::size_t>(*param_group_index_)};
  std::vector<std::size_t> all(optimizer_.param_groups().size());
  for (std::size_t g = 0; g < all.size(); ++g) all[g] = g;
  return all;
}

std::vector<double> ParamScheduler::current_values() const {
  std::vector<double> out;
  for (std::size_t g : group_indices()) out.push_back(read_option(optimizer_, g, param_name_));
  return out;
}

std::string ParamScheduler::who() const { return std::string("kindling::handlers::") + class_name_; }

StateDict ParamScheduler::state_dict() const {
  StateDict sd = new_state_dict();
  sd.insert("event_index", event_index_);
  sd.insert("param_name", param_name_);
  sd.insert("save_history", save_history_);
  sd.insert("param_group_index", param_group_index_ ? c10::IValue(*param_group_index_) : c10::IValue());
  return sd;
}

void ParamScheduler::load_state_dict(const StateDict& sd) {
  const scheduler_detail::BaseState base = scheduler_detail::read_base_state(sd, who(), param_name_);
  const c10::IValue index = require(sd, "param_group_index", who());
  const std::optional<int64_t> saved_index = index.isInt() ? std::optional<int64_t>(index.toInt()) : std::nullopt;
  KINDLING_CHECK((index.isNone() || index.isInt()) && saved_index == param_group_index_, who(),
                 ": param_group_index in the state_dict (", index.isInt() ? std::to_string(index.toInt()) : "none",
                 ") differs from this scheduler's (",
                 param_group_index_ ? std::to_string(*param_group_index_) : std::string("none"), ")");
  event_index_ = base.event_index;
  save_history_ = base.save_history;
}

SimulatedValues ParamScheduler::simulate_values(
    int64_t num_events, const std::function<std::shared_ptr<ParamScheduler>(optim::Optimizer&)>& make) {
  constexpr const char* who = "kindling::handlers::ParamScheduler::simulate_values";
  KINDLING_CHECK(static_cast<bool>(make), who, ": no function to make the scheduler");
  optim::SGD fake(std::vector<at::Tensor>{at::zeros({1}).requires_grad_()}, optim::SGDOptions(0.01));
  const std::shared_ptr<ParamScheduler> s = make(fake);
  KINDLING_CHECK(s != nullptr && &s->optimizer() == &fake, who,
                 ": the function must return a scheduler built on the optimizer it is given");
  return scheduler_detail::simulate(*s, num_events);
}

// ---- CyclicalScheduler and subclasses ----

CyclicalScheduler::CyclicalScheduler(const char* class_name, optim::Optimizer& optimizer, std::string param_name,
                                     double start_value, double end_value, int64_t cycle_size, const CyclicalOptions& o)
    : ParamScheduler(class_name, optimizer, std::move(param_name), o.save_history(), o.param_group_index()),
      start_value_(start_value),
      end_value_(end_value),
      cycle_size_(cycle_size),
      cycle_mult_(o.cycle_mult()),
      start_value_mult_(o.start_value_mult()),
      end_value_mult_(o.end_value_mult()),
      warmup_duration_(o.warmup_duration()),
      total_cycle_size_(o.warmup_duration() + cycle_size) {
  KINDLING_CHECK(cycle_size_ >= 2, who(), ": cycle_size should be larger than 1, but given ", cycle_size_,
                 "; a cycle needs at least 2 events");
  KINDLING_CHECK(cycle_mult_ > 0, who(), ": cycle_mult should be > 0, but given ", cycle_mult_);
  KINDLING_CHECK(warmup_duration_ >= 0, who(), ": warmup_duration should be >= 0, but given ", warmup_duration_);
}

std::vector<double> CyclicalScheduler::get_param() {
  if (event_index_ > cycle_size_) {  // the warm-up after the cycle
    const double progress = static_cast<double>(event_index_ - cycle_size_) / static_cast<double>(warmup_duration_);
    return {end_value_ + (start_value_ - end_value_) * progress};
  }
  return {value_at(static_cast<double>(event_index_) / static_cast<double>(cycle_size_))};
}

void CyclicalScheduler::advance() {
  const bool restart = event_index_ != 0 && event_index_ == total_cycle_size_;
  const int64_t next_size = static_cast<int64_t>(static_cast<double>(cycle_size_) * cycle_mult_);
  KINDLING_CHECK(!restart || next_size >= 1, who(), ": cycle_mult ", cycle_mult_, " shrinks cycle_size ", cycle_size_,
                 " to ", next_size, "; use a cycle_mult that keeps cycles of at least 1 event");
  if (event_index_ != 0 && event_index_ == cycle_size_) start_value_ *= start_value_mult_;
  if (restart) {
    event_index_ = 0;
    cycle_size_ = next_size;
    warmup_duration_ = static_cast<int64_t>(static_cast<double>(warmup_duration_) * cycle_mult_);
    total_cycle_size_ = warmup_duration_ + cycle_size_;
    ++cycle_;
    end_value_ *= end_value_mult_;
  }
  ParamScheduler::advance();
}

StateDict CyclicalScheduler::state_dict() const {
  StateDict sd = ParamScheduler::state_dict();
  sd.insert("start_value", start_value_);
  sd.insert("end_value", end_value_);
  sd.insert("cycle_size", cycle_size_);
  sd.insert("cycle_mult", cycle_mult_);
  sd.insert("cycle", cycle_);
  sd.insert("start_value_mult", start_value_mult_);
  sd.insert("end_value_mult", end_value_mult_);
  sd.insert("warmup_duration", warmup_duration_);
  sd.insert("total_cycle_size", total_cycle_size_);
  return sd;
}

void CyclicalScheduler::load_state_dict(const StateDict& sd) {
  const std::string w = who();
  const double start = read_double(sd, "start_value", w), end = read_double(sd, "end_value", w);
  const double mult = read_double(sd, "cycle_mult", w), start_mult = read_double(sd, "start_value_mult", w);
  const double end_mult = read_double(sd, "end_value_mult", w);
  const int64_t size = read_int(sd, "cycle_size", w), cycle = read_int(sd, "cycle", w);
  const int64_t warmup = read_int(sd, "warmup_duration", w), total = read_int(sd, "total_cycle_size", w);
  KINDLING_CHECK(size >= 1 && warmup >= 0 && total == size + warmup, w, ": the state_dict's cycle_size ", size,
                 ", warmup_duration ", warmup, " and total_cycle_size ", total,
                 " do not describe a cycle (expected cycle_size >= 1, warmup_duration >= 0, total = their sum)");
  ParamScheduler::load_state_dict(sd);
  start_value_ = start;
  end_value_ = end;
  cycle_size_ = size;
  cycle_mult_ = mult;
  cycle_ = cycle;
  start_value_mult_ = start_mult;
  end_value_mult_ = end_mult;
  warmup_duration_ = warmup;
  total_cycle_size_ = total;
}

LinearCyclicalScheduler::LinearCyclicalScheduler(optim::Optimizer& optimizer, std::string param_name,
                                                 double start_value, double end_value, int64_t cycle_size,
                                                 const CyclicalOptions& options)
    : CyclicalScheduler("LinearCyclicalScheduler", optimizer, std::move(param_name), start_value, end_value, cycle_size,
                        options),
      monotonic_(options.monotonic()) {
  KINDLING_CHECK(warmup_duration_ == 0 || monotonic_, who(), ": invalid combination of warmup_duration ",
                 warmup_duration_, " > 0 with monotonic false; set warmup_duration(0) or monotonic(true)");
}

double LinearCyclicalScheduler::value_at(double progress) const {
  if (monotonic_) return start_value_ + (end_value_ - start_value_) * progress;
  return end_value_ + (start_value_ - end_value_) * std::abs(progress - 0.5) * 2;
}

SimulatedValues LinearCyclicalScheduler::simulate_values(int64_t num_events, const std::string& param_name,
                                                         double start_value, double end_value, int64_t cycle_size,
                                                         const CyclicalOptions& options) {
  const CyclicalOptions o = CyclicalOptions(options).save_history(false);
  return ParamScheduler::simulate_values(num_events, [&](optim::Optimizer& opt) {
    return std::make_shared<LinearCyclicalScheduler>(opt, param_name, start_value, end_value, cycle_size, o);
  });
}

CosineAnnealingScheduler::CosineAnnealingScheduler(optim::Optimizer& optimizer, std::string param_name,
                                                   double start_value, double end_value, int64_t cycle_size,
                                                   const CyclicalOptions& options)
    : CyclicalScheduler("CosineAnnealingScheduler", optimizer, std::move(param_name), start_value, end_value,
                        cycle_size, options) {
  KINDLING_CHECK(!options.monotonic(), who(), ": monotonic is an option of LinearCyclicalScheduler only");
}

double CosineAnnealingScheduler::value_at(double progress) const {
  constexpr double kPi = 3.14159265358979323846;
  return start_value_ + ((end_value_ - start_value_) / 2) * (1 - std::cos(kPi * progress));
}

SimulatedValues CosineAnnealingScheduler::simulate_values(int64_t num_events, const std::string& param_name,
                                                          double start_value, double end_value, int64_t cycle_size,
                                                          const CyclicalOptions& options) {
  const CyclicalOptions o = CyclicalOptions(options).save_history(false);
  return ParamScheduler::simulate_values(num_events, [&](optim::Optimizer& opt) {
    return std::make_shared<CosineAnnealingScheduler>(opt, param_name, start_value, end_value, cycle_size, o);
  });
}

// ---- PiecewiseLinear ----

PiecewiseLinear::PiecewiseLinear(optim::Optimizer& optimizer, std::string param_name,
                                 std::vector<std::pair<int64_t, double>> milestones_values, bool save_history,
                                 std::optional<int64_t> param_group_index)
    : ParamScheduler("PiecewiseLinear", optimizer, std::move(param_name), save_history, param_group_index) {
  KINDLING_CHECK(!milestones_values.empty(), who(),
                 ": milestones_values should hold at least one (milestone, value) pair, but it is empty");
  for (const auto& [milestone, value] : milestones_values) {
    KINDLING_CHECK(milestones_.empty() || milestone >= milestones_.back(), who(),
                   ": milestones should be increasing integers, but given ", milestone,
                   " is smaller than the previous milestone ", milestones_.back(), "; sort the pairs by milestone");
    milestones_.push_back(milestone);
    values_.push_back(value);
  }
}

std::vector<double> PiecewiseLinear::get_param() {
  const int64_t e = event_index_;
  if (e < milestones_.front()) return {values_.front()};
  if (e >= milestones_.back()) return {values_.back()};
  // milestones_[i] <= e < milestones_[i + 1] for some i, at or after index_ unless a state moved back.
  if (index_ + 1 >= milestones_.size() || milestones_[index_] > e) index_ = 0;
  while (!(milestones_[index_] <= e && e < milestones_[index_ + 1])) ++index_;
  const int64_t start = milestones_[index_], end = milestones_[index_ + 1];
  return {values_[index_] +
          (values_[index_ + 1] - values_[index_]) * static_cast<double>(e - start) / static_cast<double>(end - start)};
}

StateDict PiecewiseLinear::state_dict() const {
  StateDict sd = ParamScheduler::state_dict();
  sd.insert("values", values_);
  sd.insert("milestones", milestones_);
  sd.insert("_index", static_cast<int64_t>(index_));
  return sd;
}

void PiecewiseLinear::load_state_dict(const StateDict& sd) {
  const std::string w = who();
  std::vector<double> values = scheduler_detail::read_list<double>(sd, "values", w);
  std::vector<int64_t> milestones = scheduler_detail::read_list<int64_t>(sd, "milestones", w);
  const int64_t index = read_int(sd, "_index", w);
  KINDLING_CHECK(
      !values.empty() && values.size() == milestones.size() && std::is_sorted(milestones.begin(), milestones.end()), w,
      ": the state_dict has ", milestones.size(), " milestones and ", values.size(),
      " values; expected as many of each (at least one) with increasing milestones");
  KINDLING_CHECK(index >= 0 && index < static_cast<int64_t>(milestones.size()), w, ": _index is ", index,
                 " in the state_dict, expected in [0, ", milestones.size(), ")");
  ParamScheduler::load_state_dict(sd);
  values_ = std::move(values);
  milestones_ = std::move(milestones);
  index_ = static_cast<std::size_t>(index);
}

SimulatedValues PiecewiseLinear::simulate_values(int64_t num_events, const std::string& param_name,
                                                 const std::vector<std::pair<int64_t, double>>& milestones_values) {
  return ParamScheduler::simulate_values(num_events, [&](optim::Optimizer& opt) {
    return std::make_shared<PiecewiseLinear>(opt, param_name, milestones_values);
  });
}

}  // namespace handlers
}  // namespace kindling
