// FastaiLRFinder: the lr range test's handlers (schedule, smoothed loss averaged over the
// ranks, divergence stop), ignite's suggestion rule, and the guard that restores the
// optimizer, the objects and the trainer from in-memory deep copies of their state dicts.
#include "kindling/handlers/schedulers/lr_finder.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

namespace {

constexpr const char* kFinderWho = "kindling::handlers::FastaiLRFinder";

// A copy that shares no tensor with `state` (state dicts alias the live parameters).
StateDict deep_copy(const StateDict& state) { return c10::IValue(state).deepcopy().toGenericDict(); }

std::string list_text(const std::vector<double>& values) {
  std::ostringstream out;
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  return "[" + out.str() + "]";
}

// `given` spread over `groups` parameter groups: one value for all, or one per group.
std::vector<double> per_group(const std::vector<double>& given, std::size_t groups, const char* name) {
  if (given.size() == 1) return std::vector<double>(groups, given[0]);
  KINDLING_CHECK(given.size() == groups, kFinderWho, ".attach: ", name, " should hold one value, or one per parameter ",
                 "group of the optimizer (", groups, "), got ", given.size(), " values ", list_text(given));
  return given;
}

double scheduled_lr(double start, double end, int64_t i, int64_t n, bool exp) {
  if (n <= 1) return start;
  const double r = static_cast<double>(i) / static_cast<double>(n - 1);
  return exp ? start * std::pow(end / start, r) : start + (end - start) * r;
}

void check_finder_options(const FastaiLRFinderOptions& o) {
  KINDLING_CHECK(o.smooth_f() >= 0 && o.smooth_f() < 1, kFinderWho,
                 ".attach: smooth_f is outside the range [0, 1): ", o.smooth_f());
  KINDLING_CHECK(o.diverge_th() >= 1, kFinderWho, ".attach: diverge_th should be larger than 1, got ", o.diverge_th());
  KINDLING_CHECK(o.step_mode() == "exp" || o.step_mode() == "linear", kFinderWho,
                 ".attach: step_mode should be 'exp' or 'linear', but given '", o.step_mode(), "'");
  KINDLING_CHECK(!o.num_iter() || *o.num_iter() > 0, kFinderWho,
                 ".attach: if provided, num_iter should be positive, but given ", o.num_iter().value_or(0));
}

}  // namespace

// One attachment: what attach() saved and added, and the schedule it set up.
struct FastaiLRFinder::Session {
  engine::Engine* trainer = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  Objects objects;                             // the optimizer's adapter first, then to_save
  std::vector<StateDict> saved;                // their state dicts, deep copies, same order
  StateDict saved_trainer = new_state_dict();  // the trainer's state dict
  std::vector<engine::HandlerHandle> handles;
  FastaiLRFinderOptions options;
  std::vector<double> start, end;  // per parameter group
  int64_t num_iter = 0;            // resolved at STARTED
};

FastaiLRFinder::FastaiLRFinder() = default;
FastaiLRFinder::~FastaiLRFinder() = default;

LRFinderGuard FastaiLRFinder::attach(engine::Engine& trainer, const Objects& to_save,
                                     torch::optim::Optimizer& optimizer, const FastaiLRFinderOptions& options) {
  std::shared_ptr<FastaiLRFinder> self = engine::keep_alive(*this, kFinderWho);
  KINDLING_CHECK(session_ == nullptr, kFinderWho, ".attach: the finder is already attached (to engine '",
                 session_ ? session_->trainer->name : "",
                 "'); end that attachment first (its guard's detach() or end of scope): one trainer at a time");
  check_finder_options(options);
  const std::size_t groups = optimizer.param_groups().size();
  KINDLING_CHECK(groups > 0, kFinderWho, ".attach: the optimizer has no parameter group");
  auto session = std::make_unique<Session>();
  session->trainer = &trainer;
  session->optimizer = &optimizer;
  session->options = options;
  std::vector<double> current;
  for (const auto& g : optimizer.param_groups()) current.push_back(g.options().get_lr());
  session->start = options.start_lr().empty() ? current : per_group(options.start_lr(), groups, "start_lr");
  session->end = per_group(options.end_lr(), groups, "end_lr");
  const bool exp = options.step_mode() == "exp";
  for (std::size_t g = 0; g < groups; ++g) {
    const double s = session->start[g], e = session->end[g];
    KINDLING_CHECK(s < e, kFinderWho,
                   ".attach: start_lr must be less than end_lr, start_lr=", list_text(session->start),
                   " vs end_lr=", list_text(session->end));
    KINDLING_CHECK(exp ? s > 0 : s >= 0, kFinderWho, ".attach: start_lr should be ", exp ? "> 0" : ">= 0",
                   " with step_mode '", options.step_mode(), "', got ", s, " (parameter group ", g, ")");
  }
  session->objects.emplace_back("optimizer", stateful(optimizer));
  for (const auto& entry : to_save) {
    KINDLING_CHECK(entry.second != nullptr, kFinderWho, ".attach: object '", entry.first, "' of to_save is null");
    session->objects.push_back(entry);
  }
  for (const auto& entry : session->objects) session->saved.push_back(deep_copy(entry.second->state_dict()));
  session->saved_trainer = deep_copy(trainer.state_dict());

  using engine::Events;
  auto& h = session->handles;
  h.push_back(trainer.on(Events::STARTED, [self](engine::Engine& e) { self->on_started(e); }));
  h.push_back(trainer.on(Events::ITERATION_STARTED, [self] { self->on_iteration_started(); }));
  h.push_back(trainer.on(Events::ITERATION_COMPLETED, [self](engine::Engine& e) { self->on_iteration_completed(e); }));
  h.push_back(trainer.on(Events::COMPLETED, [self] { self->on_completed(); }));
  session_ = std::move(session);
  return LRFinderGuard(self);
}

void FastaiLRFinder::on_started(engine::Engine& trainer) {
  Session& s = *session_;
  engine::State& state = trainer.state();
  std::optional<int64_t> last;  // the run's last iteration, when known
  if (state.max_iters) {
    last = *state.max_iters;
  } else if (state.max_epochs && state.epoch_length) {
    last = *state.max_epochs * *state.epoch_length;
  }
  if (s.options.num_iter()) {
    s.num_iter = *s.options.num_iter();
  } else {
    KINDLING_CHECK(last.has_value(), kFinderWho, ": num_iter is unset and the length of ", trainer.name,
                   "'s run is unknown (data without a size); set FastaiLRFinderOptions().num_iter(n), or run with "
                   "RunOptions().epoch_length(n)");
    s.num_iter = std::max<int64_t>(1, *last - state.iteration);
  }
  // A run too short for the test is lengthened, as ignite does.
  const int64_t needed = state.iteration + s.num_iter;
  if (last && *last < needed) {
    if (state.max_iters) {
      state.max_iters = needed;
    } else {
      state.max_epochs = (needed + *state.epoch_length - 1) / *state.epoch_length;
    }
  }
  history_ = LRFinderResults();
  ran_ = true;
  diverged_ = false;
  best_loss_ = 0;
}

void FastaiLRFinder::on_iteration_started() {
  Session& s = *session_;
  const int64_t i = static_cast<int64_t>(history_.loss.size());
  if (i >= s.num_iter) return;
  const bool exp = s.options.step_mode() == "exp";
  auto& groups = s.optimizer->param_groups();
  std::vector<double> lrs;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    lrs.push_back(scheduled_lr(s.start[g], s.end[g], i, s.num_iter, exp));
    groups[g].options().set_lr(lrs.back());
  }
  history_.lr.push_back(std::move(lrs));
}

void FastaiLRFinder::on_iteration_completed(engine::Engine& trainer) {
  Session& s = *session_;
  if (history_.lr.size() != history_.loss.size() + 1) return;  // not an iteration of the test
  const engine::Value& output = trainer.state().output;
  const engine::Value value = s.options.output_transform() ? s.options.output_transform()(output) : output;
  KINDLING_CHECK(value.is_number() || (value.is_tensor() && value.tensor().numel() == 1), kFinderWho,
                 ": the loss should be a number or a one-element tensor, but the trainer's output",
                 s.options.output_transform() ? " after output_transform" : "", " is ", value.to_string(),
                 "; pass FastaiLRFinderOptions().output_transform(...) that returns the loss");
  // Every rank decides on the same number: the mean of the ranks' losses.
  const double loss = dist::all_reduce(value.number(), dist::ReduceOp::kSum) / dist::get_world_size();
  const double smoothed = history_.loss.empty() || s.options.smooth_f() == 0
                              ? loss
                              : s.options.smooth_f() * loss + (1 - s.options.smooth_f()) * history_.loss.back();
  if (history_.loss.empty() || smoothed < best_loss_) best_loss_ = smoothed;
  history_.loss.push_back(smoothed);
  if (!std::isfinite(smoothed) || smoothed > s.options.diverge_th() * best_loss_) {
    diverged_ = true;
    if (dist::get_rank() == 0) {
      log(LogLevel::kInfo, std::string(kFinderWho) + ": stopping early at iteration " +
                               std::to_string(history_.loss.size()) + " of the test, the loss has diverged");
    }
    trainer.terminate();
  } else if (static_cast<int64_t>(history_.loss.size()) >= s.num_iter) {
    trainer.terminate();
  }
}

void FastaiLRFinder::on_completed() const {
  if (diverged_ || dist::get_rank() != 0) return;
  log(LogLevel::kWarning, std::string(kFinderWho) +
                              ": the run completed without the loss diverging; increase end_lr, decrease "
                              "diverge_th, or look at get_results()");
}

void FastaiLRFinder::detach_session() {
  std::unique_ptr<Session> s = std::move(session_);
  if (!s) return;
  for (auto& handle : s->handles) {
    if (handle.attached()) handle.remove();
  }
  // Every state is put back even when one fails; the first failure is reported.
  std::string first_error;
  auto attempt = [&](const std::string& what, const std::function<void()>& load) {
    try {
      load();
    } catch (const std::exception& e) {
      if (first_error.empty()) first_error = "could not restore " + what + ": " + e.what();
    }
  };
  for (std::size_t i = 0; i < s->objects.size(); ++i) {
    attempt("'" + s->objects[i].first + "'", [&] { s->objects[i].second->load_state_dict(s->saved[i], true); });
  }
  attempt("the trainer's state", [&] { s->trainer->load_state_dict(s->saved_trainer); });
  KINDLING_CHECK_T(Error, first_error.empty(), kFinderWho, ".detach: ", first_error);
}

int64_t FastaiLRFinder::suggestion_index() const {
  KINDLING_CHECK(ran_, kFinderWho,
                 ": learning rate finder didn't run yet so lr_suggestion can't be returned; run the trainer "
                 "while the finder is attached");
  const std::vector<double>& loss = history_.loss;
  int64_t lowest = -1;  // the first minimum of the finite losses
  for (std::size_t i = 0; i < loss.size(); ++i) {
    if (std::isfinite(loss[i]) && (lowest < 0 || loss[i] < loss[static_cast<std::size_t>(lowest)])) {
      lowest = static_cast<int64_t>(i);
    }
  }
  KINDLING_CHECK(lowest + 1 >= 3, kFinderWho, ": got an unexpected curve shape: the loss falls over ",
                 std::max<int64_t>(0, lowest + 1), " recorded points (of ", loss.size(),
                 "), at least 3 are needed; the curve should be somehow "
                 "U-shaped, please decrease start_lr or increase end_lr");
  int64_t steepest = 1;
  double steepest_slope = 0;
  for (int64_t j = 1; j < lowest; ++j) {
    const double slope = 0.5 * (loss[static_cast<std::size_t>(j + 1)] - loss[static_cast<std::size_t>(j - 1)]);
    if (j == 1 || slope < steepest_slope) {
      steepest = j;
      steepest_slope = slope;
    }
  }
  return steepest;
}

std::vector<double> FastaiLRFinder::lr_suggestion() const {
  return history_.lr[static_cast<std::size_t>(suggestion_index())];
}

void FastaiLRFinder::apply_suggested_lr(torch::optim::Optimizer& optimizer) const {
  const std::vector<double> lrs = lr_suggestion();
  auto& groups = optimizer.param_groups();
  KINDLING_CHECK(lrs.size() == groups.size(), kFinderWho,
                 ".apply_suggested_lr: the number of parameter groups does not match between the given optimizer "
                 "and the one used for estimating the learning rate: ",
                 groups.size(), " vs ", lrs.size(), "; pass the optimizer that was tested");
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(lrs[g]);
}

LRFinderGuard::LRFinderGuard(std::shared_ptr<FastaiLRFinder> finder) : finder_(std::move(finder)) {}

LRFinderGuard::LRFinderGuard(LRFinderGuard&& other) noexcept : finder_(std::move(other.finder_)) {}

LRFinderGuard::~LRFinderGuard() {
  try {
    detach();
  } catch (const std::exception& e) {
    log(LogLevel::kError, e.what());
  }
}

void LRFinderGuard::detach() {
  if (!finder_) return;
  std::shared_ptr<FastaiLRFinder> finder = std::move(finder_);
  finder->detach_session();
}

engine::Engine& LRFinderGuard::trainer() const {
  KINDLING_CHECK(finder_ && finder_->session_, kFinderWho,
                 "'s guard: trainer() after detach(); the attachment has ended");
  return *finder_->session_->trainer;
}

}  // namespace handlers
}  // namespace kindling
