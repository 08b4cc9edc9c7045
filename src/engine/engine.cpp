// kindling::engine::Engine: the run loop (ignite's order of events and its terminate /
// interrupt / exception rules), handler registry and exact data position.
#include "kindling/engine/engine.h"

#include "engine/registry.h"

#include <c10/util/Exception.h>
#include <c10/util/Type.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace engine {

// ---- stop requests -------------------------------------------------------------------------

class Engine::TerminateSignal {};
class Engine::TerminateEpochSignal {};
class Engine::InterruptSignal {};

Engine::Engine(ProcessFunction process_function, int)
    : process_(std::move(process_function)), registry_(std::make_shared<Registry>()) {
  KINDLING_CHECK(static_cast<bool>(process_), "kindling::engine::Engine: the process function is empty");
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

void Engine::terminate(bool skip_completed) {
  logger.info(name + ": Terminate signaled. Engine will stop after current iteration is finished.");
  terminate_ = skip_completed ? Stop::kSkipCompleted : Stop::kYes;
}

void Engine::terminate_epoch() {
  logger.info(name +
              ": Terminate current epoch is signaled. Current epoch iteration will stop after "
              "current iteration is finished.");
  terminate_epoch_ = true;
}

void Engine::interrupt() {
  logger.info(name +
              ": interrupt signaled. Engine will interrupt the run after current iteration is "
              "finished.");
  interrupt_ = true;
}

// After the handlers of the event that ends `phase`: acts on terminate / terminate_epoch /
// interrupt requests (in ignite's order).
void Engine::check(Phase phase) {
  if (terminate_ != Stop::kNo) throw TerminateSignal();
  if (terminate_epoch_) {
    if (phase == Phase::kEpochCompleted) {
      terminate_epoch_ = false;  // the epoch is over anyway
    } else if (phase == Phase::kStarted || phase == Phase::kEpochStarted) {
      terminate_epoch_ = false;
      KINDLING_CHECK(false, "kindling::engine::", name, ": terminate_epoch() was called in a handler of ",
                     phase == Phase::kStarted ? "STARTED" : "EPOCH_STARTED",
                     ", where no epoch is running yet; call it from an iteration event, or use terminate()");
    } else {
      throw TerminateEpochSignal();
    }
  }
  if (interrupt_) {
    fire(Events::INTERRUPT);
    interrupt_ = false;
    interrupted_at_ = phase;
    throw InterruptSignal();
  }
}

// ---- the run ---------------------------------------------------------------------------------

namespace {

std::string hms(double seconds) {
  const auto total_ms = static_cast<int64_t>(seconds * 1000.0 + 0.5);
  char text[32];
  std::snprintf(text, sizeof(text), "%02lld:%02lld:%06.3f", static_cast<long long>(total_ms / 3600000),
                static_cast<long long>((total_ms / 60000) % 60), static_cast<double>(total_ms % 60000) / 1000.0);
  return text;
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Checks run()'s options against each other and against the bounds the state already has.
void check_run_options(const RunOptions& o, const State& state, const std::string& where) {
  KINDLING_CHECK(!(o.max_epochs() && o.max_iters()), where,
                 ": arguments max_iters and max_epochs are mutually exclusive; please provide only max_epochs or "
                 "max_iters");
  KINDLING_CHECK(!o.max_iters() || !state.max_epochs, where,
                 ": to switch from max_epochs to max_iters mode during resume, you must first reset by calling "
                 "state().max_epochs.reset() before calling run()");
  KINDLING_CHECK(!o.max_epochs() || !state.max_iters, where,
                 ": to switch from max_iters to max_epochs mode during resume, you must first reset by calling "
                 "state().max_iters.reset() before calling run()");
  for (auto [value, what] : {std::pair<std::optional<int64_t>, const char*>{o.max_epochs(), "max_epochs"},
                             {o.max_iters(), "max_iters"},
                             {o.epoch_length(), "epoch_length"}}) {
    KINDLING_CHECK(!value || *value >= 1, where, ": argument ", what, " is invalid (", value.value_or(0),
                   "); please set a correct ", what, " positive value");
  }
}

// Replaces the state's bound (max_epochs or max_iters) with run()'s where both have one, after
// checking that the new bound is not behind the state's epoch or iteration.
void apply_new_bounds(const RunOptions& o, State& state, const std::string& where) {
  if (state.max_epochs && o.max_epochs()) {
    KINDLING_CHECK(*o.max_epochs() >= state.epoch, where,
                   ": argument max_epochs should be greater than or equal "
                   "to the start epoch defined in the state: ",
                   *o.max_epochs(), " vs ", state.epoch,
                   ". Call state().max_epochs.reset() before run() to restart the training from the beginning.");
    state.max_epochs = o.max_epochs();
  }
  if (state.max_iters && o.max_iters()) {
    KINDLING_CHECK(*o.max_iters() >= state.iteration, where,
                   ": argument max_iters should be greater than or equal "
                   "to the start iteration defined in the state: ",
                   *o.max_iters(), " vs ", state.iteration,
                   ". Call state().max_iters.reset() before run() to restart the training from the beginning.");
    state.max_iters = o.max_iters();
  }
}

}  // namespace

namespace detail {
void throw_batch_type_error(const std::type_info& wanted, const std::type_info& got) {
  KINDLING_CHECK(false, "kindling::engine::Engine: the process function takes batches of type ",
                 c10::demangle(wanted.name()), " but the data yields ", c10::demangle(got.name()),
                 "; make the process function's second parameter `const ", c10::demangle(got.name()),
                 "&` (or std::any)");
}
}  // namespace detail

// ignite's _is_done.
bool Engine::done() const {
  if (state_.max_iters && state_.iteration >= *state_.max_iters) return true;
  if (!state_.max_epochs) return false;
  if (state_.epoch >= *state_.max_epochs) return true;
  return state_.epoch_length && *state_.epoch_length > 0 &&
         state_.iteration - origin_.iteration >= (*state_.max_epochs - origin_.epoch) * *state_.epoch_length;
}

State& Engine::run_source(std::shared_ptr<detail::DataSource> data, const RunOptions& options) {
  prepare_run(*data, options);
  // After interrupt() the run goes on with the data it had, positioned where it stopped.
  if (interrupted_at_ == Phase::kNone || !data_started_) {
    data_ = std::move(data);
    data_started_ = false;
  }
  if (interrupted_at_ == Phase::kNone) {
    terminate_ = Stop::kNo;
    terminate_epoch_ = false;
    run_start_ = std::chrono::steady_clock::now();
    state_.times["EPOCH_COMPLETED"] = 0.0;
    state_.times["COMPLETED"] = 0.0;
  }
  interrupt_ = false;
  exception_routed_ = false;
  try {
    run_epochs();
  } catch (const InterruptSignal&) {
    return state_;  // interrupted_at_ says where the next run() goes on
  } catch (...) {
    data_started_ = false;
    interrupted_at_ = Phase::kNone;
    if (exception_routed_) throw;
    logger.error(name + " run is terminating due to exception: " + describe(std::current_exception()));
    handle_exception(std::current_exception());
  }
  data_started_ = false;
  return state_;
}

void Engine::prepare_run(detail::DataSource& data, const RunOptions& o) {
  const std::string where = "kindling::engine::" + name + ".run";
  check_run_options(o, state_, where);
  // ignite's _check_and_set: a new bound applies before the new-run / resume decision, so a
  // finished 5-epoch run given max_epochs=10 goes on with epochs 6..10.
  apply_new_bounds(o, state_, where);
  if (interrupted_at_ != Phase::kNone) {
    logger.info(name + " run resuming from iteration " + std::to_string(state_.iteration) + ", epoch " +
                std::to_string(state_.epoch) + " after interrupt()");
    return;
  }
  std::optional<int64_t> epoch_length = o.epoch_length();
  if (!epoch_length) epoch_length = data.size();
  const bool fresh = (!state_.max_epochs && !state_.max_iters) || done();
  if (fresh) {
    if (!epoch_length) epoch_length = state_.epoch_length;
    // Empty data (a rank whose shard is empty) runs epochs of no iteration, so that epoch
    // handlers such as metrics' reductions still run there; ignite refuses empty data.
    KINDLING_CHECK(!(epoch_length && *epoch_length == 0 && o.max_iters()), where,
                   ": the data is empty, so "
                   "max_iters=",
                   o.max_iters().value_or(0), " can never be reached; give max_epochs instead");
    state_.iteration = 0;
    state_.epoch = 0;
    origin_ = DataOrigin();
    state_.max_iters = o.max_iters();
    state_.max_epochs = o.max_iters() ? std::nullopt : std::optional<int64_t>(o.max_epochs().value_or(1));
    state_.epoch_length = epoch_length;
    sharding_ = data.sharding();
    logger.info(name + " run starting with " +
                (o.max_iters() ? "max_iters=" + std::to_string(*o.max_iters())
                               : "max_epochs=" + std::to_string(*state_.max_epochs)) +
                ".");
    return;
  }
  const std::optional<detail::Sharding> now = data.sharding();
  if (sharding_ && now && *sharding_ != *now) reshard_position(*now, epoch_length, where);
  if (now) sharding_ = now;
  if (state_.epoch_length && o.epoch_length()) {
    KINDLING_CHECK(*o.epoch_length() == *state_.epoch_length, where,
                   ": argument epoch_length should be same as in "
                   "the state, but given ",
                   *o.epoch_length(), " vs ", *state_.epoch_length);
  }
  if (!state_.epoch_length) state_.epoch_length = epoch_length;
  // Continue in the epoch that holds the next iteration, from the batch that follows the
  // last one done: a run continued after terminate() and one resumed from state_dict() agree.
  if (state_.epoch_length && *state_.epoch_length > 0)
    state_.epoch = origin_.epoch + (state_.iteration - origin_.iteration) / *state_.epoch_length;
  logger.info(name + " run resuming from iteration " + std::to_string(state_.iteration) + ", epoch " +
              std::to_string(state_.epoch) + " until " +
              (state_.max_iters ? std::to_string(*state_.max_iters) + " iterations"
                                : std::to_string(state_.max_epochs.value_or(0)) + " epochs"));
}

void Engine::run_epochs() {
  Phase resume = interrupted_at_;
  interrupted_at_ = Phase::kNone;
  bool first_epoch = true;
  try {
    if (resume == Phase::kNone) {
      fire(Events::STARTED);
      check(Phase::kStarted);
    }
    for (;;) {
      const bool inside = resume != Phase::kNone && resume != Phase::kStarted && resume != Phase::kEpochCompleted;
      if (!inside) {
        resume = Phase::kNone;
        if (done() || terminate_ != Stop::kNo) break;
        ++state_.epoch;
        // The first epoch of a run that continues a state goes on from the batch after the
        // last one done (ignite's _init_iter); later epochs start at their beginning.
        const int64_t len = state_.epoch_length.value_or(0);
        in_epoch_ =
            first_epoch && len > 0
                ? std::max<int64_t>(0, state_.iteration - origin_.iteration - (state_.epoch - 1 - origin_.epoch) * len)
                : 0;
        epoch_start_ = std::chrono::steady_clock::now();
        fire(Events::EPOCH_STARTED);
        check(Phase::kEpochStarted);
      }
      first_epoch = false;
      const Phase at = resume == Phase::kEpochStarted ? Phase::kNone : resume;
      resume = Phase::kNone;
      try {
        run_one_epoch(at);
      } catch (const TerminateEpochSignal&) {
        terminate_epoch_ = false;
        // As ignite's set_data: the next epoch starts a fresh pass over the data.
        origin_ = DataOrigin{state_.iteration, state_.epoch, current_pass_ + 1};
        data_started_ = false;
        fire(Events::TERMINATE_SINGLE_EPOCH);
      } catch (const TerminateSignal&) {
        throw;
      } catch (const InterruptSignal&) {
        throw;
      } catch (...) {
        const std::exception_ptr error = std::current_exception();
        logger.error(name + ": current run is terminating due to exception: " + describe(error));
        handle_exception(error);  // returns when a handler dealt with it: the epoch ends here
      }
      state_.times["EPOCH_COMPLETED"] = since(epoch_start_);
      fire(Events::EPOCH_COMPLETED);
      state_.times["EPOCH_COMPLETED"] = since(epoch_start_);
      check(Phase::kEpochCompleted);
      logger.info(name + ": Epoch[" + std::to_string(state_.epoch) +
                  "] Complete. Time taken: " + hms(state_.times["EPOCH_COMPLETED"]));
    }
  } catch (const TerminateSignal&) {
    fire(Events::TERMINATE);
  }
  state_.times["COMPLETED"] = since(run_start_);
  if (terminate_ != Stop::kSkipCompleted) {
    fire(Events::COMPLETED);
    state_.times["COMPLETED"] = since(run_start_);
  }
  logger.info(name + " run complete. Time taken: " + hms(state_.times["COMPLETED"]));
}

// Draws the next batch into state_.batch, positioning the data first when the run starts
// it: batch number k = iteration - origin_.iteration counted from the origin's pass, i.e.
// pass origin_.pass + k / size at offset k % size.
bool Engine::next_batch() {
  if (!data_started_) {
    const auto n = data_->size();
    const int64_t k = state_.iteration - origin_.iteration;
    if (n && *n > 0) {
      current_pass_ = origin_.pass + k / *n;
      data_->start(current_pass_, k % *n);
    } else {
      current_pass_ = origin_.pass;
      data_->start(current_pass_, state_.epoch_length && *state_.epoch_length > 0 ? k % *state_.epoch_length : 0);
    }
    data_started_ = true;
  }
  return data_->next(state_.batch);
}

// Starts the next pass over the data after it ran out.
void Engine::restart_data() {
  const auto n = data_->size();
  current_pass_ = n && *n > 0 ? origin_.pass + (state_.iteration - origin_.iteration) / *n : origin_.pass;
  data_->start(current_pass_, 0);
  data_started_ = true;
}

// After an iteration: true when the epoch is complete; throws TerminateSignal when
// max_iters is reached inside an epoch (ignite: TERMINATE, then COMPLETED).
bool Engine::iteration_ends_epoch() {
  if (state_.epoch_length && in_epoch_ >= *state_.epoch_length) return true;
  if (state_.max_iters && state_.iteration >= *state_.max_iters) {
    terminate_ = Stop::kYes;
    throw TerminateSignal();
  }
  return false;
}

// One epoch's iterations. `at` is where an interrupted epoch goes on: right after the
// handlers of that phase's event (kNone: at the top of an iteration).
void Engine::run_one_epoch(Phase at) {
  bool restarted = false;  // the data just started over: no second GET_BATCH_STARTED
  if (at == Phase::kIterationCompleted) {
    if (iteration_ends_epoch()) return;
    at = Phase::kNone;
  }
  for (;; at = Phase::kNone) {
    switch (at) {
      case Phase::kStopIteration:
        restart_data();
        restarted = true;
        continue;
      case Phase::kNone:
        if (state_.epoch_length && in_epoch_ >= *state_.epoch_length) return;  // empty data or a complete epoch
        state_.batch.reset();
        if (!restarted) {
          fire(Events::GET_BATCH_STARTED);
          check(Phase::kGetBatchStarted);
        }
        [[fallthrough]];
      case Phase::kGetBatchStarted:
        if (!next_batch()) {
          if (!state_.epoch_length) {
            // Data without a size: the first pass defines the epoch length.
            KINDLING_CHECK(!(in_epoch_ == 0 && state_.max_iters), "kindling::engine::", name,
                           ".run: the data is empty, so max_iters=", *state_.max_iters, " can never be reached");
            state_.epoch_length = in_epoch_;
            if (state_.max_iters) state_.max_epochs = (*state_.max_iters + in_epoch_ - 1) / in_epoch_;
            return;
          }
          if (restarted) {
            KINDLING_CHECK(!state_.max_iters, "kindling::engine::", name,
                           ".run: the data yields no batch after "
                           "starting over (iteration ",
                           state_.iteration, " of max_iters=", *state_.max_iters,
                           "); an Engine needs data that can be iterated again");
            logger.warning(name +
                           ": data iterator can not provide data anymore but required total number "
                           "of iterations to run is not reached. Current iteration: " +
                           std::to_string(state_.iteration));
            return;
          }
          fire(Events::DATALOADER_STOP_ITERATION);
          check(Phase::kStopIteration);
          restart_data();
          restarted = true;
          continue;
        }
        restarted = false;
        state_.output = Value();
        fire(Events::GET_BATCH_COMPLETED);
        check(Phase::kGetBatchCompleted);
        [[fallthrough]];
      case Phase::kGetBatchCompleted:
        ++in_epoch_;
        ++state_.iteration;
        fire(Events::ITERATION_STARTED);
        check(Phase::kIterationStarted);
        [[fallthrough]];
      case Phase::kIterationStarted:
        state_.output = process_(*this, state_.batch);
        fire(Events::ITERATION_COMPLETED);
        check(Phase::kIterationCompleted);
        break;
      default: break;
    }
    if (iteration_ends_epoch()) return;
  }
}

void Engine::handle_exception(std::exception_ptr error) {
  if (!has_event_handler(Events::EXCEPTION_RAISED)) {
    exception_routed_ = true;
    std::rethrow_exception(error);
  }
  exception_ = error;
  struct Clear {
    Engine& e;
    ~Clear() { e.exception_ = nullptr; }
  } clear{*this};
  try {
    fire(Events::EXCEPTION_RAISED);
  } catch (...) {
    exception_routed_ = true;  // a handler's exception leaves run() as it is
    throw;
  }
}

}  // namespace engine
}  // namespace kindling
