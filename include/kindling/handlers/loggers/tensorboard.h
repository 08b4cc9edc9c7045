#pragma once
/// \file
/// kindling::handlers::TensorboardLogger: ignite's TensorboardLogger with its OutputHandler and
/// OptimizerParamsHandler, writing TensorBoard event files itself (no TensorFlow, no
/// protobuf library). Also BaseLogger (what it shares with JsonLogger) and
/// global_step_from_engine.
///
/// \code
///   using kindling::engine::Events;
///   kindling::handlers::TensorboardLogger tb("runs/exp1");
///   tb.attach_output_handler(trainer, Events::ITERATION_COMPLETED.every(100), "training", {},
///                            [](const Value& out) { return std::map<std::string, double>{{"loss", out.number()}}; });
///   tb.attach_output_handler(evaluator, Events::COMPLETED, "validation", {"accuracy", "loss"}, {},
///                            kindling::handlers::global_step_from_engine(trainer));   // x axis: trainer's epoch
///   tb.attach_opt_params_handler(trainer, Events::ITERATION_STARTED, optimizer);   // "lr/group_0", ...
///   trainer.run(loader, 10);
///   tb.close();
/// \endcode
///
/// Ranks: construct the logger on every rank and attach the same handlers everywhere; only
/// rank 0 creates the directory and the file and writes. The rank is read when the logger
/// is constructed: kindling::dist::get_rank() once initialized, else the launcher's
/// variables as kindling::dist::detect_launch_environment reads them (RANK, mpirun's
/// OMPI_COMM_WORLD_RANK, srun's SLURM_PROCID, ...), else 0. On other ranks the logger is
/// inert: its handlers return at once (they do not even call the transforms) and add_scalar
/// does nothing. Nothing here communicates.
///
/// Lifetimes: handlers share the file with the logger, so destroying the logger while
/// handlers stay attached is safe: it closes the file. Writes after close() (or after the
/// logger is gone), from a handler or add_scalar / add_histogram, are dropped, and the first
/// one is told as a warning in kindling's log on rank 0; they do not throw. The rule is the
/// same for every BaseLogger (TensorboardLogger, JsonLogger, HtmlReport): only rank 0 writes,
/// so a throw there would end rank 0 alone while the other ranks, whose handlers do nothing,
/// wait at their next collective for good. Keep the logger until the last run ends to log
/// every value. An optimizer given to attach_opt_params_handler, and the engine given to
/// global_step_from_engine, must outlive the handlers using them.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/events.h"
#include "kindling/engine/value.h"
#include "kindling/export.h"

namespace at {
class Tensor;
}  // namespace at
namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace kindling {
namespace handlers {

/// What an output handler logs from the engine's output (State::output): name -> number,
/// each logged as "<tag>/<name>" (ignite's output_transform returning a dict).
using OutputScalarsTransform = std::function<std::map<std::string, double>(const engine::Value& output)>;

/// The step a handler logs at (kindling/engine/engine.h).
using GlobalStepTransform = engine::GlobalStepTransform;

/// ignite's global_step_from_engine: a GlobalStepTransform that reads `other`'s counters
/// instead of those of the engine firing; typically an evaluator's handler logging at the
/// trainer's epoch. For the event fired (or `custom_event` when given): its counter in
/// `other` (iteration for GET_BATCH_* / ITERATION_*, epoch for STARTED / EPOCH_* /
/// COMPLETED, for a user-defined event the times `other` fired it); for events without a
/// counter (TERMINATE, EXCEPTION_RAISED, ...) and user-defined events `other` has not
/// registered, `fallback`'s counter of `other` (ignite's fallback_attr, "epoch" by default).
/// Throws kindling::UsageError when `fallback` is neither kEpoch nor kIteration. `other` must
/// outlive the transform and stay where it is (not moved). Local; any rank.
KINDLING_API GlobalStepTransform global_step_from_engine(engine::Engine& other,
                                                         std::optional<engine::Event> custom_event = std::nullopt,
                                                         engine::EventCounter fallback = engine::EventCounter::kEpoch);

/// What a parameter scalar handler logs of each parameter (or gradient): `name` goes in the
/// tag ("weights_norm/..."), `reduce` maps the tensor to the number. `reduce` is given the
/// tensor detached (ignite passes p.data and p.grad): it shares the parameter's storage but
/// does not require grad, so the reduction records no autograd history.
struct KINDLING_API ParamReduction {
  std::string name;
  std::function<double(const at::Tensor&)> reduce;
  /// The 2-norm of all elements (torch.norm, ignite's default reduction).
  static ParamReduction norm();
};

namespace detail {
class EventFileSink;

/// Internal: where a logger's scalars go (an event file, JSON lines). Thread-safe.
class KINDLING_API ScalarSink {
 public:
  virtual ~ScalarSink() = default;
  /// Writes one scalar; `tag` may be empty. After close() it drops the value, warning once in
  /// kindling's log (see "Lifetimes" in the file comment); it does not throw for that.
  virtual void write(const std::string& tag, const std::string& name, double value, int64_t step) = 0;
  /// Flushes to disk and closes; a no-op the second time.
  virtual void close() = 0;
};
}  // namespace detail

/// ignite's BaseLogger: the attach methods shared by TensorboardLogger and JsonLogger.
/// Not copyable; not movable (handlers refer to its file, not to it, so moving would be
/// harmless, but one owner keeps close() unambiguous).
class KINDLING_API BaseLogger {
 public:
  /// Closes the file as close() does; an error is written to kindling's log instead of thrown.
  virtual ~BaseLogger();
  BaseLogger(const BaseLogger&) = delete;
  BaseLogger& operator=(const BaseLogger&) = delete;

  /// ignite's OutputHandler: on each of `events`, logs at step
  /// global_step_transform(engine, event) (default: the engine's counter for that event,
  /// State::iteration for iteration events, State::epoch for epoch events):
  /// - each of `metric_names` from engine.state().metrics, in the order given ({"all"}:
  ///   every metric, by name), as "<tag>/<name>": a number or 0-dim tensor as itself; a
  ///   1-dim tensor as "<tag>/<name>/<i>" per element (ignite's rule, so also for a tensor
  ///   of shape [1]); a tuple of tensors as "<tag>/<name>/<i>" and named tensors as
  ///   "<tag>/<name>/<key>", each tensor again by these rules; a name missing from the
  ///   metrics, a tensor of 2 or more dimensions or an empty Value is skipped with one
  ///   warning in kindling's log per handler and name (ignite warns and skips too);
  /// - then each entry of output_transform(engine.state().output) as "<tag>/<name>".
  /// A name that is not UTF-8 among `tag` and `metric_names` is refused here on every rank;
  /// one known only at the event (an output_transform's, a metric's under {"all"}) is not
  /// logged, with one warning on rank 0 (a throw there would stop rank 0 alone).
  /// Throws kindling::UsageError when there is nothing to log (no metric names, no
  /// output_transform), or when an event has no counter (TERMINATE, ...) and no
  /// global_step_transform is given. Returns the handle that removes the handler (from all
  /// `events`; with several events, the one firing is read from Engine::last_event()). Call
  /// it on every rank; it writes on rank 0 only.
  engine::HandlerHandle attach_output_handler(engine::Engine& engine, const engine::EventsList& events,
                                              const std::string& tag, std::vector<std::string> metric_names = {},
                                              OutputScalarsTransform output_transform = {},
                                              GlobalStepTransform global_step_transform = {});

  /// ignite's OptimizerParamsHandler: on each of `events`, logs each parameter group's
  /// `param_name` as "<param_name>/group_<i>", or "<tag>/<param_name>/group_<i>", at the
  /// engine's counter for the event. "lr" works with every optimizer (OptimizerOptions::
  /// get_lr); "momentum", "dampening", "weight_decay", "eps", "alpha", "lr_decay" and
  /// "initial_accumulator_value" with the LibTorch optimizers (SGD, Adam, AdamW, Adagrad,
  /// RMSprop) whose options have them. Throws kindling::UsageError when the optimizer has no
  /// parameter group, a group lacks `param_name` (naming what is readable), or an event has
  /// no counter. `optimizer` must outlive the handler. Call it on every rank; it writes on
  /// rank 0 only.
  engine::HandlerHandle attach_opt_params_handler(engine::Engine& engine, const engine::EventsList& events,
                                                  torch::optim::Optimizer& optimizer,
                                                  const std::string& param_name = "lr",
                                                  const std::optional<std::string>& tag = std::nullopt);

  /// ignite's WeightsScalarHandler: on each of `events`, logs reduction(p) for each parameter
  /// p of `model` (named_parameters(), recursively) whose name starts with one of
  /// `whitelist` (every parameter when it is empty), as "<tag>/weights_<reduction.name>/<name>"
  /// with the name's dots turned into slashes ("weights_norm/fc1/weight"; no "<tag>/" for an
  /// empty tag), at the engine's counter for the event. Throws kindling::UsageError when no
  /// parameter passes the whitelist (naming the parameters), the reduction has no function
  /// or an event has no counter. `model` must outlive the handler. Call it on every rank; it
  /// writes on rank 0 only (under DDP the ranks' parameters are equal).
  engine::HandlerHandle attach_weights_scalar_handler(engine::Engine& engine, const engine::EventsList& events,
                                                      const torch::nn::Module& model,
                                                      ParamReduction reduction = ParamReduction::norm(),
                                                      const std::string& tag = "",
                                                      std::vector<std::string> whitelist = {});
  /// ignite's GradsScalarHandler: as attach_weights_scalar_handler, of each parameter's
  /// gradient, as "<tag>/grads_<reduction.name>/<name>"; a parameter without a gradient (not
  /// used yet, or frozen) is skipped at that step. Attach it where the gradients exist (e.g.
  /// ITERATION_COMPLETED of a trainer whose step does not zero them afterwards). Throws as
  /// attach_weights_scalar_handler.
  engine::HandlerHandle attach_grads_scalar_handler(engine::Engine& engine, const engine::EventsList& events,
                                                    const torch::nn::Module& model,
                                                    ParamReduction reduction = ParamReduction::norm(),
                                                    const std::string& tag = "",
                                                    std::vector<std::string> whitelist = {});
  /// Flushes and closes the file (fsync); later writes are dropped with one warning (see
  /// "Lifetimes" in the file comment). A no-op when already closed and on ranks other than 0.
  /// Throws kindling::Error when the system reports that the data could not be written.
  void close();
  /// Whether this logger writes (rank 0), as opposed to being inert (other ranks).
  bool active() const { return sink_ != nullptr; }

 protected:
  /// `who` is the class name used in messages ("TensorboardLogger").
  explicit BaseLogger(std::string who);
  /// Makes the logger active, writing to `sink` (the derived constructor calls it on rank 0).
  void set_sink(std::shared_ptr<detail::ScalarSink> sink) { sink_ = std::move(sink); }
  detail::ScalarSink* sink() const { return sink_.get(); }
  const std::string& who() const { return who_; }

 private:
  std::string who_;
  std::shared_ptr<detail::ScalarSink> sink_;
};

/// Writes TensorBoard event files: `<log_dir>/events.out.tfevents.<unix seconds>.<hostname>`
/// (with ".<n>" appended in the rare case that a file of that name exists already: a second
/// logger in the same second), TFRecords of Event messages, the first one carrying
/// file_version "brain.Event:2", then one Event{wall_time, step, summary{value{tag,
/// simple_value}}} per scalar. Each record is written with one write(2) as it is logged
/// (TensorBoard sees it at once); close() fsyncs. Values are stored as float32 (TensorBoard's
/// simple_value); histograms as TensorFlow's HistogramProto (float64).
class KINDLING_API TensorboardLogger : public BaseLogger {
 public:
  /// On rank 0: creates `log_dir` (and missing parents) and the event file, and writes the
  /// file-version record; elsewhere nothing (see the file comment for how the rank is found).
  /// Throws kindling::UsageError for an empty `log_dir` or inconsistent launcher variables
  /// before initialize (a RANK that is not an integer, RANK without WORLD_SIZE; every rank),
  /// kindling::Error when the directory or file cannot be made (rank 0).
  explicit TensorboardLogger(std::string log_dir);

  /// Writes one scalar under `tag` at `step` (TensorBoard's add_scalar; `tag` must be UTF-8).
  /// A no-op on ranks other than 0; after close() the value is dropped with one warning.
  /// Throws kindling::UsageError for a tag that is not UTF-8 (on every rank), kindling::Error
  /// when the write fails.
  void add_scalar(const std::string& tag, double value, int64_t step);

  /// Writes a histogram of the finite elements of `values` (any shape and floating or integer
  /// type, read as float64) under `tag` at `step` (TensorBoard's add_histogram): min, max,
  /// count, sum, sum of squares, and `bins` equal-width buckets from the smallest to the
  /// largest element (numpy.histogram's rule: each bucket holds its lower edge, the last also
  /// its upper one, each value counted as the written edges say; one bucket when all elements
  /// are equal, or when the range is too narrow (subnormal) or too wide (max - min overflows)
  /// for a positive finite width). Non-finite elements are left out with one warning per
  /// tag; nothing is written when none is finite. A no-op on ranks other than 0; after
  /// close() the histogram is dropped with one warning. Throws
  /// kindling::UsageError for bins < 1, an undefined tensor or a tag that is not UTF-8;
  /// kindling::Error when the write fails.
  void add_histogram(const std::string& tag, const at::Tensor& values, int64_t step, int bins = 30);
  /// ignite's WeightsHistHandler: on each of `events`, a histogram of each parameter of
  /// `model` whose name starts with one of `whitelist` (all when empty) as
  /// "<tag>/weights/<name>" (dots turned into slashes, no "<tag>/" for an empty tag), at the
  /// engine's counter for the event, with add_histogram's buckets. Throws
  /// kindling::UsageError when no parameter passes the whitelist, bins < 1, or an event has
  /// no counter. `model` must outlive the handler. Call it on every rank; rank 0 writes.
  engine::HandlerHandle attach_weights_hist_handler(engine::Engine& engine, const engine::EventsList& events,
                                                    const torch::nn::Module& model, const std::string& tag = "",
                                                    std::vector<std::string> whitelist = {}, int bins = 30);
  /// ignite's GradsHistHandler: as attach_weights_hist_handler, of each parameter's gradient,
  /// as "<tag>/grads/<name>"; a parameter without a gradient is skipped at that step.
  engine::HandlerHandle attach_grads_hist_handler(engine::Engine& engine, const engine::EventsList& events,
                                                  const torch::nn::Module& model, const std::string& tag = "",
                                                  std::vector<std::string> whitelist = {}, int bins = 30);

  const std::string& log_dir() const { return log_dir_; }
  /// The event file's path on rank 0; "" on other ranks.
  const std::string& file_path() const { return file_path_; }

 private:
  std::string log_dir_;
  std::string file_path_;
  std::shared_ptr<detail::EventFileSink> events_;  // rank 0's file (null elsewhere)
};

}  // namespace handlers
}  // namespace kindling
