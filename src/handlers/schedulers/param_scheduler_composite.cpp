// Parameter schedulers made of others: ConcatScheduler, LRScheduler (a LibTorch scheduler as a
// handler) and create_lr_scheduler_with_warmup, with ignite's rules and state_dict keys; and
// stateful() of a LibTorch scheduler stepped by hand (kindling/handlers/checkpointing/stateful.h).
#include <algorithm>
#include <limits>

#include "handlers/schedulers/param_scheduler_detail.h"
#include "kindling/error.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "kindling/handlers/schedulers/param_scheduler.h"

namespace kindling {
namespace handlers {

namespace optim = torch::optim;
using scheduler_detail::read_int;
using scheduler_detail::require;
using scheduler_detail::TorchSchedulerAccess;

namespace {

// Checks what ConcatScheduler's base needs before it is built; the first scheduler.
const ParamScheduler& first_of(const std::vector<std::shared_ptr<ParamScheduler>>& schedulers) {
  KINDLING_CHECK(schedulers.size() >= 2, "kindling::handlers::ConcatScheduler: schedulers should hold more than one ",
                 "parameter scheduler, but it holds ", schedulers.size(), "; use the scheduler itself");
  for (std::size_t i = 0; i < schedulers.size(); ++i) {
    KINDLING_CHECK(schedulers[i] != nullptr, "kindling::handlers::ConcatScheduler: the scheduler at index ", i,
                   " is null");
  }
  return *schedulers[0];
}

// ignite's ParamGroupScheduler, as the warm-up of create_lr_scheduler_with_warmup: one
// PiecewiseLinear per parameter group; state_dict {"schedulers": [("lr", state), ...]}.
class GroupWarmup final : public ParamScheduler {
 public:
  GroupWarmup(optim::Optimizer& o, std::vector<std::shared_ptr<PiecewiseLinear>> parts, bool save_history)
      : ParamScheduler("ParamGroupScheduler", o, "lr", save_history, std::nullopt), parts_(std::move(parts)) {}
  std::vector<double> get_param() override {
    std::vector<double> out;
    for (const auto& p : parts_) out.push_back(p->get_param().front());
    return out;
  }
  void advance() override {
    for (const auto& p : parts_) p->advance();
  }
  StateDict state_dict() const override { return scheduler_detail::named_states(names(), parts()); }
  void load_state_dict(const StateDict& sd) override {
    scheduler_detail::load_named_states(who(), sd, names(), parts());
  }

 private:
  std::vector<std::string> names() const { return std::vector<std::string>(parts_.size(), "lr"); }
  std::vector<ParamScheduler*> parts() const {
    std::vector<ParamScheduler*> out;
    for (const auto& p : parts_) out.push_back(p.get());
    return out;
  }
  std::vector<std::shared_ptr<PiecewiseLinear>> parts_;
};

// create_lr_scheduler_with_warmup for a ParamScheduler, or (from_torch) for an LRScheduler that wraps
// a LibTorch scheduler; the arguments are checked by the callers.
std::shared_ptr<ConcatScheduler> with_warmup(const std::shared_ptr<ParamScheduler>& after, bool from_torch,
                                             double start, int64_t duration, std::optional<double> end,
                                             bool save_history, SimulatedValues* out) {
  optim::Optimizer& opt = after->optimizer();
  const std::size_t groups = opt.param_groups().size();
  const std::vector<double> first = from_torch ? std::vector<double>() : after->get_param();
  KINDLING_CHECK(from_torch || first.size() == 1 || first.size() == groups,
                 "kindling::handlers::create_lr_scheduler_with_warmup: lr_scheduler's get_param() gave ", first.size(),
                 " values for ", groups, " parameter groups");
  std::vector<std::shared_ptr<PiecewiseLinear>> parts;
  int64_t length = 0;  // events of the warm-up
  for (std::size_t g = 0; g < groups; ++g) {
    const double lr = scheduler_detail::read_option(opt, g, "lr");
    const double end_g = end.value_or(lr);
    std::vector<std::pair<int64_t, double>> mv{{0, start}, {duration - 1, end_g}};
    if (from_torch) {
      if (lr != end_g) mv.emplace_back(duration, lr);  // one event at the group's lr; the scheduler scales it next
    } else if ((first.size() == 1 ? first[0] : first[g]) == end_g) {
      // The scheduler starts at end_g: the warm-up stops one step short of it instead of repeating it.
      if (duration > 2) {
        mv.back() = {duration - 2, end_g - (end_g - start) / static_cast<double>(duration - 1)};
      } else {
        mv.pop_back();
      }
    }
    length = std::max(length, mv.back().first + 1);
    parts.push_back(std::make_shared<PiecewiseLinear>(opt, "lr", mv, save_history, static_cast<int64_t>(g)));
  }
  std::vector<std::shared_ptr<ParamScheduler>> schedulers{
      std::make_shared<GroupWarmup>(opt, std::move(parts), save_history), after};
  auto combined = std::make_shared<ConcatScheduler>(schedulers, std::vector<int64_t>{length}, save_history);
  if (out != nullptr) *out = ConcatScheduler::simulate_values(static_cast<int64_t>(out->size()), schedulers, {length});
  return combined;
}

void check_warmup(int64_t warmup_duration) {
  KINDLING_CHECK(warmup_duration >= 2, "kindling::handlers::create_lr_scheduler_with_warmup: warmup_duration should ",
                 "be at least 2 events, but given ", warmup_duration);
}

}  // namespace

// ---- ConcatScheduler ----

ConcatScheduler::ConcatScheduler(std::vector<std::shared_ptr<ParamScheduler>> schedulers,
                                 std::vector<int64_t> durations, bool save_history)
    : ParamScheduler("ConcatScheduler", first_of(schedulers).optimizer(), first_of(schedulers).param_name(),
                     save_history, std::nullopt),
      schedulers_(std::move(schedulers)),
      durations_(std::move(durations)) {
  KINDLING_CHECK(durations_.size() + 1 == schedulers_.size(), who(), ": incorrect number of schedulers or durations, ",
                 "given ", schedulers_.size(), " and ", durations_.size(),
                 "; give one duration per scheduler but the last (which runs to the end)");
  for (std::size_t i = 0; i < durations_.size(); ++i) {
    KINDLING_CHECK(durations_[i] >= 1, who(), ": durations[", i, "] is ", durations_[i], ", expected >= 1 event");
  }
  for (const auto& s : schedulers_) {
    KINDLING_CHECK(!s->needs_metric(), who(), ": ", s->who(), " steps from a metric value, which a ConcatScheduler ",
                   "does not have; attach it on its own (its attach(evaluator) reads the metric), not in a sequence");
    KINDLING_CHECK(&s->optimizer() == &optimizer(), who(), ": schedulers should be related to the same optimizer, ",
                   "but ", s->who(), " sets another one");
    KINDLING_CHECK(s->param_name() == param_name(), who(), ": schedulers should be related to the same param_name, ",
                   "but given '", s->param_name(), "' and '", param_name(), "'");
  }
  setup();
}

void ConcatScheduler::setup() {
  current_duration_ = scheduler_index_ < durations_.size() ? durations_[scheduler_index_] : -1;
}

std::vector<double> ConcatScheduler::get_param() {
  return schedulers_[current_duration_ == 0 ? scheduler_index_ + 1 : scheduler_index_]->get_param();
}

void ConcatScheduler::advance() {
  if (current_duration_ == 0) {
    ++scheduler_index_;
    setup();
  }
  schedulers_[scheduler_index_]->advance();
  --current_duration_;
  ++event_index_;
}

std::vector<std::size_t> ConcatScheduler::group_indices() const {
  return schedulers_[scheduler_index_]->group_indices();
}

StateDict ConcatScheduler::state_dict() const {
  StateDict sd = ParamScheduler::state_dict();
  sd.insert("_current_duration", current_duration_);
  sd.insert("durations", durations_);
  sd.insert("_scheduler_index", static_cast<int64_t>(scheduler_index_));
  c10::impl::GenericList list(c10::AnyType::get());
  for (const auto& s : schedulers_) list.push_back(c10::IValue(s->state_dict()));
  sd.insert("schedulers", list);
  return sd;
}

void ConcatScheduler::load_state_dict(const StateDict& sd) {
  const std::string w = who();
  const c10::IValue v = require(sd, "schedulers", w);
  const std::size_t n = v.isList() ? v.toList().size() : 0;
  KINDLING_CHECK(n == schedulers_.size(), w, ": the state_dict holds ", n, " state dicts of concatenated schedulers, ",
                 "but ", schedulers_.size(), " are needed");
  const int64_t current_duration = read_int(sd, "_current_duration", w);
  std::vector<int64_t> durations = scheduler_detail::read_list<int64_t>(sd, "durations", w);
  const int64_t index = read_int(sd, "_scheduler_index", w);
  KINDLING_CHECK(durations.size() == durations_.size(), w, ": the state_dict has ", durations.size(),
                 " durations, expected ", durations_.size());
  const bool last = index + 1 == static_cast<int64_t>(n);
  KINDLING_CHECK(index >= 0 && index < static_cast<int64_t>(n) && (last ? current_duration < 0 : current_duration >= 0),
                 w, ": _scheduler_index ", index, " and _current_duration ", current_duration, " in the state_dict do ",
                 "not go together (expected an index in [0, ", n, "), a duration < 0 only for the last scheduler)");
  std::vector<ParamScheduler*> targets;
  std::vector<StateDict> states;
  for (std::size_t i = 0; i < n; ++i) {
    const c10::IValue e = v.toList().get(i);
    KINDLING_CHECK(e.isGenericDict(), w, ": scheduler ", i, " of the state_dict is a ", e.tagKind(),
                   ", expected a state dict");
    targets.push_back(schedulers_[i].get());
    states.push_back(e.toGenericDict());
  }
  std::vector<StateDict> backup;
  for (ParamScheduler* s : targets) backup.push_back(s->state_dict());
  scheduler_detail::load_all(targets, states);
  try {
    ParamScheduler::load_state_dict(sd);
  } catch (...) {
    scheduler_detail::load_all(targets, backup);
    throw;
  }
  durations_ = std::move(durations);
  scheduler_index_ = static_cast<std::size_t>(index);
  current_duration_ = current_duration;
}

SimulatedValues ConcatScheduler::simulate_values(int64_t num_events,
                                                 const std::vector<std::shared_ptr<ParamScheduler>>& schedulers,
                                                 const std::vector<int64_t>& durations) {
  ConcatScheduler concat(schedulers, durations);
  std::vector<ParamScheduler*> targets;
  std::vector<StateDict> states;
  for (const auto& s : schedulers) {
    targets.push_back(s.get());
    states.push_back(s->state_dict());
  }
  const std::vector<double> values = scheduler_detail::read_all(concat.optimizer(), concat.param_name());
  auto restore = [&] {
    scheduler_detail::load_all(targets, states);
    scheduler_detail::write_all(concat.optimizer(), concat.param_name(), values);
  };
  SimulatedValues out;
  try {
    out = scheduler_detail::simulate(concat, num_events);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return out;
}

// ---- LRScheduler ----

LRScheduler::LRScheduler(optim::Optimizer& optimizer, std::shared_ptr<optim::LRScheduler> lr_scheduler,
                         bool save_history, bool use_legacy)
    : ParamScheduler("LRScheduler", optimizer, "lr", save_history, std::nullopt),
      lr_scheduler_(std::move(lr_scheduler)) {
  KINDLING_CHECK(lr_scheduler_ != nullptr, who(), ": lr_scheduler is null; pass a torch::optim::LRScheduler (e.g. ",
                 "torch::optim::StepLR) built on the optimizer");
  if (use_legacy) ++TorchSchedulerAccess::step_count(*lr_scheduler_);
}

std::vector<double> LRScheduler::get_param() { return TorchSchedulerAccess::lrs(*lr_scheduler_); }

void LRScheduler::advance() {
  ParamScheduler::advance();
  ++TorchSchedulerAccess::step_count(*lr_scheduler_);
}

int64_t LRScheduler::last_epoch() const { return TorchSchedulerAccess::step_count(*lr_scheduler_); }

StateDict LRScheduler::state_dict() const {
  StateDict sd = ParamScheduler::state_dict();
  StateDict inner = new_state_dict();
  inner.insert("last_epoch", last_epoch());
  sd.insert("lr_scheduler", inner);
  return sd;
}

namespace {

// A LibTorch scheduler's step count from a state's "last_epoch": last_epoch + `offset` (0 for
// LRScheduler's state, as ignite's; 1 for torch's own state, whose constructor steps once).
unsigned read_step_count(const StateDict& sd, const std::string& who, int64_t offset) {
  const int64_t count = read_int(sd, "last_epoch", who) + offset;
  KINDLING_CHECK(count >= 0 && count <= static_cast<int64_t>(std::numeric_limits<unsigned>::max()), who,
                 ": last_epoch is ", count - offset, " in the state_dict, expected ", -offset, " or more");
  return static_cast<unsigned>(count);
}

// A LibTorch scheduler in a checkpoint, in torch's lr_scheduler.state_dict() keys. A LibTorch
// step() with step count k sets epoch k's rates, torch's sets epoch last_epoch + 1's (its
// constructor's step set epoch 0's): so _step_count is k and last_epoch k - 1, as torch's.
class TorchSchedulerState : public Stateful {
 public:
  explicit TorchSchedulerState(std::shared_ptr<optim::LRScheduler> scheduler) : scheduler_(std::move(scheduler)) {}
  StateDict state_dict() const override {
    const auto count = static_cast<int64_t>(TorchSchedulerAccess::step_count(*scheduler_));
    c10::List<double> lrs;
    for (double lr : TorchSchedulerAccess::current_lrs(*scheduler_)) lrs.push_back(lr);
    StateDict sd = new_state_dict();
    sd.insert("last_epoch", count - 1);
    sd.insert("_step_count", count);
    sd.insert("_last_lr", lrs);
    return sd;
  }
  void load_state_dict(const StateDict& state, bool) override {
    TorchSchedulerAccess::step_count(*scheduler_) =
        read_step_count(state, "kindling::handlers::stateful(lr_scheduler)", 1);
  }

 private:
  std::shared_ptr<optim::LRScheduler> scheduler_;
};

}  // namespace

void LRScheduler::load_state_dict(const StateDict& sd) {
  const c10::IValue inner = require(sd, "lr_scheduler", who());
  KINDLING_CHECK(inner.isGenericDict(), who(), ": state attribute 'lr_scheduler' holds a ", inner.tagKind(),
                 ", expected a dict");
  const unsigned count = read_step_count(inner.toGenericDict(), who(), 0);
  ParamScheduler::load_state_dict(sd);
  TorchSchedulerAccess::step_count(*lr_scheduler_) = count;
}

std::shared_ptr<Stateful> stateful(std::shared_ptr<optim::LRScheduler> scheduler) {
  KINDLING_CHECK(scheduler != nullptr, "kindling::handlers::stateful: the LibTorch scheduler is null; pass the ",
                 "torch::optim::LRScheduler (e.g. a std::make_shared<torch::optim::StepLR>) to save");
  return std::make_shared<TorchSchedulerState>(std::move(scheduler));
}

SimulatedValues LRScheduler::simulate_values(int64_t num_events, optim::Optimizer& optimizer,
                                             const std::shared_ptr<optim::LRScheduler>& lr_scheduler) {
  LRScheduler wrapper(optimizer, lr_scheduler);
  const unsigned count = TorchSchedulerAccess::step_count(*lr_scheduler);
  const std::vector<double> lrs = scheduler_detail::read_all(optimizer, "lr");
  auto restore = [&] {
    TorchSchedulerAccess::step_count(*lr_scheduler) = count;
    scheduler_detail::write_all(optimizer, "lr", lrs);
  };
  SimulatedValues out;
  try {
    out = scheduler_detail::simulate(wrapper, num_events);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return out;
}

// ---- create_lr_scheduler_with_warmup ----

std::shared_ptr<ConcatScheduler> create_lr_scheduler_with_warmup(std::shared_ptr<ParamScheduler> lr_scheduler,
                                                                 double warmup_start_value, int64_t warmup_duration,
                                                                 std::optional<double> warmup_end_value,
                                                                 bool save_history,
                                                                 SimulatedValues* output_simulated_values) {
  KINDLING_CHECK(lr_scheduler != nullptr, "kindling::handlers::create_lr_scheduler_with_warmup: lr_scheduler is null");
  KINDLING_CHECK(lr_scheduler->param_name() == "lr",
                 "kindling::handlers::create_lr_scheduler_with_warmup: ", "lr_scheduler schedules '",
                 lr_scheduler->param_name(), "', expected 'lr'");
  check_warmup(warmup_duration);
  return with_warmup(lr_scheduler, false, warmup_start_value, warmup_duration, warmup_end_value, save_history,
                     output_simulated_values);
}

std::shared_ptr<ConcatScheduler> create_lr_scheduler_with_warmup(optim::Optimizer& optimizer,
                                                                 std::shared_ptr<optim::LRScheduler> lr_scheduler,
                                                                 double warmup_start_value, int64_t warmup_duration,
                                                                 std::optional<double> warmup_end_value,
                                                                 bool save_history,
                                                                 SimulatedValues* output_simulated_values) {
  KINDLING_CHECK(lr_scheduler != nullptr, "kindling::handlers::create_lr_scheduler_with_warmup: lr_scheduler is null");
  check_warmup(warmup_duration);
  // One step ahead: the warm-up's last event already gives the scheduler's first value (ignite's rule).
  auto wrapped = std::make_shared<LRScheduler>(optimizer, std::move(lr_scheduler), save_history,
                                               /*use_legacy=*/true);
  return with_warmup(wrapped, true, warmup_start_value, warmup_duration, warmup_end_value, save_history,
                     output_simulated_values);
}

}  // namespace handlers
}  // namespace kindling
