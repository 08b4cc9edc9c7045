// ParamGroupScheduler (kindling/handlers/schedulers/param_group_scheduler.h): schedulers stepped
// together with one state_dict.
#include "kindling/handlers/schedulers/param_group_scheduler.h"

#include "handlers/schedulers/param_scheduler_detail.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {
namespace {

constexpr const char* kWho = "kindling::handlers::ParamGroupScheduler";

void check_schedulers(const std::vector<std::shared_ptr<ParamScheduler>>& schedulers) {
  KINDLING_CHECK(!schedulers.empty(), kWho, ": give at least one scheduler");
  for (std::size_t i = 0; i < schedulers.size(); ++i) {
    KINDLING_CHECK(schedulers[i] != nullptr, kWho, ": the scheduler at index ", i, " is null");
  }
}

}  // namespace

ParamGroupScheduler::ParamGroupScheduler(std::vector<std::shared_ptr<ParamScheduler>> schedulers,
                                         std::vector<std::string> names, bool save_history)
    : schedulers_(std::move(schedulers)), names_(std::move(names)) {
  check_schedulers(schedulers_);
  if (names_.empty()) {
    for (const auto& s : schedulers_) names_.push_back(s->param_name());
  }
  KINDLING_CHECK(names_.size() == schedulers_.size(), kWho, ": ", schedulers_.size(), " schedulers but ", names_.size(),
                 " names; give one name per scheduler (or none)");
  set_save_history(save_history);
}

void ParamGroupScheduler::step() {
  for (const auto& s : schedulers_) s->step();
}

void ParamGroupScheduler::operator()(engine::Engine&) { step(); }

engine::HandlerHandle ParamGroupScheduler::attach(engine::Engine& engine, const engine::EventsList& event) {
  std::shared_ptr<ParamGroupScheduler> self = engine::keep_alive(*this, kWho);
  return engine.add_event_handler(event, [self](engine::Engine&) { self->step(); });
}

std::vector<std::vector<double>> ParamGroupScheduler::get_param() {
  std::vector<std::vector<double>> out;
  for (const auto& s : schedulers_) out.push_back(s->get_param());
  return out;
}

void ParamGroupScheduler::set_save_history(bool save_history) {
  for (const auto& s : schedulers_) s->set_save_history(save_history);
}

namespace {
std::vector<ParamScheduler*> raw(const std::vector<std::shared_ptr<ParamScheduler>>& schedulers) {
  std::vector<ParamScheduler*> out;
  for (const auto& s : schedulers) out.push_back(s.get());
  return out;
}
}  // namespace

StateDict ParamGroupScheduler::state_dict() const { return scheduler_detail::named_states(names_, raw(schedulers_)); }

void ParamGroupScheduler::load_state_dict(const StateDict& sd) {
  scheduler_detail::load_named_states(kWho, sd, names_, raw(schedulers_));
}

std::vector<std::pair<int64_t, std::vector<std::vector<double>>>> ParamGroupScheduler::simulate_values(
    int64_t num_events, const std::vector<std::shared_ptr<ParamScheduler>>& schedulers) {
  check_schedulers(schedulers);
  KINDLING_CHECK(num_events >= 0, kWho, "::simulate_values: num_events must be >= 0, got ", num_events);
  // What stepping changes: each scheduler's state and its parameter in its optimizer's groups.
  std::vector<StateDict> states;
  std::vector<std::vector<double>> options;
  for (const auto& s : schedulers) {
    states.push_back(s->state_dict());
    options.push_back(scheduler_detail::read_all(s->optimizer(), s->param_name()));
  }
  std::vector<std::pair<int64_t, std::vector<std::vector<double>>>> out;
  for (int64_t i = 0; i < num_events; ++i) {
    std::vector<std::vector<double>> params;
    for (const auto& s : schedulers) params.push_back(s->get_param());
    out.emplace_back(i, std::move(params));
    for (const auto& s : schedulers) s->advance();
  }
  for (std::size_t k = 0; k < schedulers.size(); ++k) {  // every snapshot was taken before any step
    schedulers[k]->load_state_dict(states[k]);
    scheduler_detail::write_all(schedulers[k]->optimizer(), schedulers[k]->param_name(), options[k]);
  }
  return out;
}

}  // namespace handlers
}  // namespace kindling
