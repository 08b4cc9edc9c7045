#pragma once
/// \file
/// kindling::engine::Engine: ignite's Engine in C++. It runs a process function over the
/// batches of some data for a number of epochs (or iterations) and fires events that
/// handlers (metrics, checkpoints, logging, your own lambdas) attach to.
///
/// \code
///   using namespace kindling::engine;
///   Engine trainer([&](Engine& e, const kindling::data::Example& batch) -> Value {
///     optimizer.zero_grad();
///     auto loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
///     loss.backward();
///     optimizer.step();
///     return loss.item<double>();
///   });
///   trainer.on(Events::EPOCH_COMPLETED, [](Engine& e) { ... e.state().epoch ... });
///   trainer.run(loader, 5);   // 5 epochs
/// \endcode
///
/// Order of events in a run (ignite's): STARTED; for each epoch EPOCH_STARTED, then for each
/// iteration GET_BATCH_STARTED, GET_BATCH_COMPLETED, ITERATION_STARTED, the process function,
/// ITERATION_COMPLETED; EPOCH_COMPLETED; at the end COMPLETED. When the data runs out and has
/// to start over (before the first batch of an epoch when epoch_length is the data's size),
/// DATALOADER_STOP_ITERATION fires between GET_BATCH_STARTED and GET_BATCH_COMPLETED.
/// After each event's handlers the engine checks for terminate() (fires TERMINATE, then
/// COMPLETED unless skip_completed), terminate_epoch() (fires TERMINATE_SINGLE_EPOCH, then
/// EPOCH_COMPLETED, then goes on with the next epoch) and interrupt() (fires INTERRUPT and
/// returns from run(); the next run() continues). An exception from the process function or
/// a handler fires EXCEPTION_RAISED when it has handlers (which see it through
/// Engine::exception()) and ends the run; without such handlers run() rethrows it.
///
/// Exact resume, beyond ignite: the position in the data is a function of State::iteration.
/// A run resumed from a state_dict() saved at any iteration (or continued after
/// interrupt() or terminate()) draws the same batches in the same order as the
/// uninterrupted run. For a kindling DataLoader the engine sets the loader's epoch to the
/// pass over the data (epoch - 1 when epoch_length is the loader's size, so you need not
/// call set_epoch; a set_epoch() of yours is overridden) and starts it at the right batch
/// without loading the batches before it; other ranges are advanced element by element.
///
/// Threads and ranks: an Engine is used from one thread. It does not communicate by itself;
/// what its handlers do (metrics' reductions, checkpoints) may, so every rank must run the
/// same number of epochs through engines with the same handlers.

#include <any>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kindling/data/loader.h"
#include "kindling/engine/detail/data_source.h"
#include "kindling/engine/detail/process_function.h"
#include "kindling/engine/events.h"
#include "kindling/engine/logger.h"
#include "kindling/engine/observer.h"
#include "kindling/engine/state.h"
#include "kindling/engine/state_dict.h"
#include "kindling/engine/value.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace engine {

/// Options of Engine::run (chain the setters): ignite's max_epochs / max_iters / epoch_length.
struct KINDLING_API RunOptions {
  /// Epochs to run (>= 1). Unset: the state's value when resuming, else 1. Not with max_iters.
  KINDLING_ARG(std::optional<int64_t>, max_epochs);

  /// Iterations to run in all (>= 1), instead of max_epochs.
  KINDLING_ARG(std::optional<int64_t>, max_iters);

  /// Iterations per epoch (>= 1). Unset: the data's size; for data without a size, the
  /// number of batches in the first pass.
  KINDLING_ARG(std::optional<int64_t>, epoch_length);
};

/// A handler's registration, returned by add_event_handler / on; remove() detaches it
/// (from every event it was added for). Harmless after the engine is gone.
class KINDLING_API HandlerHandle {
 public:
  HandlerHandle() = default;
  /// Removes the handler; throws kindling::UsageError when it was already removed.
  void remove();
  /// Whether the handler is still attached to a live engine.
  bool attached() const;

 private:
  friend class Engine;
  std::weak_ptr<void> registry_;
  int64_t id_ = -1;
};

class KINDLING_API Engine {
 public:
  /// The process function type after adaptation (see the templated constructor).
  using ProcessFunction = std::function<Value(Engine&, const std::any&)>;

  /// `process_function(Engine&, const Batch&)` returns anything convertible to Value (or
  /// void). Batch is the type the data yields (e.g. kindling::data::Example); a run over
  /// data of another type throws kindling::UsageError naming both types.
  template <typename F, typename = std::enable_if_t<!std::is_same<std::decay_t<F>, Engine>::value>>
  explicit Engine(F process_function) : Engine(detail::adapt_process_function(std::move(process_function)), 0) {}
  Engine(ProcessFunction process_function, int /*adapted*/);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  /// Moves the engine with its handlers and state (factories return engines by value); the
  /// moved-from engine must not be used again. Do not move an engine while it runs.
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  /// An identity that stays the same when the engine is moved (for bookkeeping of attached
  /// handlers, e.g. by metrics).
  const void* id() const { return registry_.get(); }

  State& state() { return state_; }
  const State& state() const { return state_; }

  /// Runs over `data` (a kindling::data::DataLoader, or any range whose elements are the
  /// process function's batch type; an lvalue is used in place and must outlive the run,
  /// an rvalue is moved in). Starts a new run when the state is fresh or the last run
  /// finished, and otherwise continues the state (after load_state_dict, interrupt() or
  /// terminate()). Throws kindling::UsageError for bad options (both max_epochs and
  /// max_iters, values < 1, max_epochs below the current epoch, an epoch_length other than
  /// the state's), and rethrows what the process function or a handler throws when no
  /// EXCEPTION_RAISED handler is attached. Local: the engine itself does not communicate.
  template <typename Data>
  State& run(Data&& data, const RunOptions& options = RunOptions()) {
    return run_source(detail::make_data_source(std::forward<Data>(data)), options);
  }
  /// run(data, RunOptions().max_epochs(max_epochs)).
  template <typename Data>
  State& run(Data&& data, int64_t max_epochs) {
    return run(std::forward<Data>(data), RunOptions().max_epochs(max_epochs));
  }

  /// Attaches `handler` to every event of `events` (each with its filter). The handler is
  /// callable as handler(Engine&) or handler(); for EXCEPTION_RAISED also as
  /// handler(Engine&, std::exception_ptr). Handlers of one event run in the order added;
  /// one added while its event fires runs in that same firing. Throws kindling::UsageError
  /// for a user-defined event that was not registered.
  template <typename F>
  HandlerHandle add_event_handler(const EventsList& events, F handler) {
    return add_handler(events, detail::adapt_handler(std::move(handler)));
  }
  /// Same as add_event_handler (ignite's `@engine.on(...)`).
  template <typename F>
  HandlerHandle on(const EventsList& events, F handler) {
    return add_event_handler(events, std::move(handler));
  }
  /// Whether any handler is attached to `event` (filters ignored).
  bool has_event_handler(const Event& event) const;
  /// Whether this handle's handler is attached to this engine.
  bool has_event_handler(const HandlerHandle& handle) const;
  /// Detaches the handler. Throws kindling::UsageError when it is not attached to this engine.
  void remove_event_handler(const HandlerHandle& handle);
  /// Adds an observer of every event firing and handler call (kindling/engine/observer.h;
  /// the time profilers use it). The engine keeps it alive. Throws kindling::UsageError for
  /// a null observer or one already added. Local.
  void add_observer(std::shared_ptr<EventObserver> observer);
  /// Removes an observer added with add_observer; false when it was not there. Local.
  bool remove_observer(const EventObserver& observer);

  /// Makes user-defined events known to this engine. Throws kindling::UsageError for a
  /// built-in event.
  void register_events(const std::vector<Event>& events);
  /// Fires a registered user-defined event (its counter goes up by one first) or a built-in
  /// one, running its handlers now. Throws kindling::UsageError for an unregistered
  /// user-defined event; rethrows what a handler throws.
  void fire_event(const Event& event);
  /// The last event fired (unset before the first).
  const std::optional<Event>& last_event() const { return last_event_; }

  /// Stops the run after the current event's handlers: TERMINATE fires, then COMPLETED
  /// (unless skip_completed). The state keeps its counters; a later run() continues.
  void terminate(bool skip_completed = false);
  /// Ends the current epoch after the current event's handlers: TERMINATE_SINGLE_EPOCH,
  /// then EPOCH_COMPLETED, then the next epoch (the data goes on from the next batch).
  void terminate_epoch();
  /// Pauses the run after the current event's handlers: INTERRUPT fires and run() returns;
  /// the next run() continues from the next batch.
  void interrupt();
  bool should_terminate() const { return terminate_ != Stop::kNo; }

  /// The exception being handled, inside an EXCEPTION_RAISED handler (null elsewhere).
  std::exception_ptr exception() const { return exception_; }

  /// ignite's state_dict: {"epoch_length", "iteration", "max_epochs" or "max_iters"} plus
  /// the user attributes named in state_dict_user_keys(). Local; any rank.
  StateDict state_dict() const;
  /// Restores counters from state_dict(): needs "epoch_length", exactly one of "max_epochs"
  /// / "max_iters", exactly one of "iteration" / "epoch", and every user key. Throws
  /// kindling::UsageError (ignite's messages) for a missing or conflicting key, or an
  /// iteration / epoch that the max_* cannot reach. The next run() resumes there.
  void load_state_dict(const StateDict& state_dict);
  /// Names of State::attributes saved by state_dict() and required by load_state_dict().
  std::vector<std::string>& state_dict_user_keys() { return user_keys_; }

  /// The name used in log lines ("Engine" unless changed), e.g. "trainer".
  std::string name = "Engine";
  /// Where the engine's own lines go (ignite's engine.logger): the run's start, each
  /// epoch's time and the run's end at INFO (see kindling/engine/logger.h for the default
  /// and its ranks); assign a kindling::handlers::setup_logger(...) to use yours.
  EngineLogger logger;

 private:
  enum class Stop { kNo, kYes, kSkipCompleted };
  // Where a run stood when interrupt() took effect: the event whose handlers had just run.
  enum class Phase {
    kNone,
    kStarted,
    kEpochStarted,
    kGetBatchStarted,
    kGetBatchCompleted,
    kStopIteration,
    kIterationStarted,
    kIterationCompleted,
    kEpochCompleted
  };
  struct Registry;
  friend class HandlerHandle;
  class TerminateSignal;
  class TerminateEpochSignal;
  class InterruptSignal;

  HandlerHandle add_handler(const EventsList& events, detail::Handler handler);
  State& run_source(std::shared_ptr<detail::DataSource> data, const RunOptions& options);
  void prepare_run(detail::DataSource& data, const RunOptions& options);
  void run_epochs();
  void run_one_epoch(Phase at);
  bool next_batch();
  void restart_data();
  bool iteration_ends_epoch();
  void fire(const Event& event);
  void check(Phase phase);
  bool done() const;
  struct DataOrigin;
  // The "data_origin" entry of a state dict (zeros without one). Throws kindling::UsageError.
  static DataOrigin read_origin(const StateDict& sd, const std::string& where);
  void handle_exception(std::exception_ptr error);
  // A resume whose data is sharded otherwise than the loaded state's (another world size):
  // keeps the position in samples, or throws kindling::UsageError (elastic_resume.cpp).
  // The "data_sharding" entry of a state dict (nullopt without one). Throws kindling::UsageError.
  static std::optional<detail::Sharding> read_sharding(const StateDict& sd, const std::string& where);
  void reshard_position(const detail::Sharding& now, std::optional<int64_t> data_epoch_length,
                        const std::string& where);

  ProcessFunction process_;
  State state_;
  std::shared_ptr<Registry> registry_;
  std::vector<std::string> user_keys_;
  std::optional<Event> last_event_;
  std::exception_ptr exception_;
  bool exception_routed_ = false;  // the exception leaving a run already went through EXCEPTION_RAISED

  std::shared_ptr<detail::DataSource> data_;
  bool data_started_ = false;  // data_ is positioned at batch number state_.iteration
  Phase interrupted_at_ = Phase::kNone;
  int64_t in_epoch_ = 0;  // iterations done in the current epoch
  // Where the data's passes and the epochs' iterations are counted from: pass `pass` of the
  // data began at iteration `iteration`, after `epoch` epochs. Zero unless terminate_epoch()
  // started a fresh pass (as ignite does); saved by state_dict() when not zero.
  struct DataOrigin {
    int64_t iteration = 0, epoch = 0, pass = 0;
  } origin_;
  int64_t current_pass_ = 0;  // the pass of the data being drawn
  // How the data of the state is sharded: the run's data's, or the loaded "data_sharding".
  std::optional<detail::Sharding> sharding_;
  std::chrono::steady_clock::time_point run_start_, epoch_start_;
  Stop terminate_ = Stop::kNo;
  bool terminate_epoch_ = false;
  bool interrupt_ = false;
};

/// The step a handler writes at, from the engine firing and the event fired (ignite's
/// global_step_transform(engine, event_name)); used by the loggers and Checkpoint.
using GlobalStepTransform = std::function<int64_t(Engine& engine, const Event& event)>;

}  // namespace engine
}  // namespace kindling
