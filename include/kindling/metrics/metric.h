#pragma once
/// \file
/// kindling::metrics::Metric: ignite's Metric base. A metric accumulates local state in
/// update() (no communication), and compute() reduces it across the ranks of the job (ignite's
/// sync_all_reduce) without changing the local state, so compute() may be called again.
///
/// \code
///   auto acc = std::make_shared<kindling::metrics::Accuracy>();
///   acc->attach(evaluator, "accuracy");                 // reset / update / compute per epoch
///   evaluator.run(test_loader);
///   double a = evaluator.state().metrics.at("accuracy").number();
/// \endcode
///
/// Ranks: update() is local; compute() (and so the handler attached on the "completed"
/// event) is a collective when kindling::dist runs more than one process: every rank must
/// call it the same number of times, which it does when every rank runs the engine over its
/// shard (a rank whose shard is empty runs epochs of no iteration and still takes part).
///
/// Output convention: update() receives the engine's output after output_transform; most
/// metrics read (y_pred, y) from a tuple's first two tensors or from the names "y_pred" and
/// "y" (see y_pred_and_y()).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/engine/value.h"
#include "kindling/error.h"
#include "kindling/export.h"

namespace kindling {
namespace metrics {

using engine::Value;

/// compute() was called before the metric saw enough data (ignite's NotComputableError).
class KINDLING_API NotComputableError : public Error {
 public:
  using Error::Error;
};

/// The events on which a metric attached with a usage resets, updates and computes.
struct UsageEvents {
  engine::Event started, updated, completed;
};

/// When an attached metric resets, updates and computes (ignite's MetricUsage): one of the five
/// built-in usages, BatchFiltered(event), or a usage of your own. A small value; copies compare
/// equal. Local, any rank.
class KINDLING_API Usage {
 public:
  static const Usage kEpochWise;         // reset EPOCH_STARTED, update ITERATION_COMPLETED, compute EPOCH_COMPLETED
  static const Usage kRunningEpochWise;  // reset STARTED, update and compute EPOCH_COMPLETED
  static const Usage kBatchWise;         // reset ITERATION_STARTED, update and compute ITERATION_COMPLETED
  static const Usage kRunningBatchWise;  // reset STARTED, update and compute ITERATION_COMPLETED
  static const Usage kSingleEpochRunningBatchWise;  // reset EPOCH_STARTED, update and compute ITERATION_COMPLETED

  /// A usage of your own (ignite's MetricUsage(started, completed, iteration_completed)), named
  /// `name` for messages; its events may carry filters. Throws kindling::UsageError for an
  /// empty name.
  Usage(std::string name, UsageEvents events);

  /// ignite's usage_name: "epoch_wise", "batch_filtered", your name, ...
  const char* name() const;
  /// The three events. Does not throw.
  UsageEvents events() const;

  /// Equal: the same built-in usage, or the same name and the same three events (a filtered
  /// event equals its copies only, see Event::operator==).
  bool operator==(const Usage& other) const;
  bool operator!=(const Usage& other) const { return !(*this == other); }
  /// A strict order consistent with ==, so that a Usage can key a std::map.
  bool operator<(const Usage& other) const;

 private:
  struct Custom;
  // The built-in usages are constant-initialized (no static-initialization order to mind).
  constexpr explicit Usage(int builtin) : builtin_(builtin) {}
  int builtin_ = -1;  // index of a built-in usage, -1 for a custom one
  std::shared_ptr<const Custom> custom_;
};

/// ignite's BatchFiltered(every=..., once=..., before=..., after=..., event_filter=...): reset at
/// EPOCH_STARTED, update on `iteration_completed` (Events::ITERATION_COMPLETED with a filter,
/// e.g. `Events::ITERATION_COMPLETED.every(2)`), compute at EPOCH_COMPLETED; named
/// "batch_filtered". Throws kindling::UsageError naming the event when it is not
/// ITERATION_COMPLETED. Local, any rank.
KINDLING_API Usage BatchFiltered(const engine::Event& iteration_completed);

/// ignite's usage_name: usage.name().
KINDLING_API const char* to_string(const Usage& usage);
/// The events of `usage`: usage.events(). Does not throw.
KINDLING_API UsageEvents events_of(const Usage& usage);

/// Maps the engine's output to what update() reads.
using OutputTransform = std::function<Value(const Value&)>;

class KINDLING_API Metric : public std::enable_shared_from_this<Metric> {
 public:
  /// `output_transform` (empty: identity) is applied to the engine's output before update();
  /// `device` is where the accumulators live (CPU by default).
  explicit Metric(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  virtual ~Metric();
  Metric(const Metric&) = delete;
  Metric& operator=(const Metric&) = delete;

  /// Clears the accumulated state. Local.
  virtual void reset() = 0;
  /// Accumulates one (transformed) output. Local; throws kindling::UsageError for an output
  /// of the wrong kind or shape, naming the metric.
  virtual void update(const Value& output) = 0;
  /// The value over everything seen since reset(), reduced across ranks; the local state is
  /// unchanged. A collective in a distributed run (all ranks). Throws NotComputableError
  /// when nothing was seen on any rank.
  virtual Value compute() = 0;
  /// The metric's class name, for messages ("Accuracy").
  virtual std::string name() const = 0;

  /// Attaches to `engine` under `name`: reset, update and compute on the usage's events;
  /// compute stores its result in engine.state().metrics[name] (see completed()). Attaching
  /// one metric twice (two names) shares the reset and update. The metric must be owned by a
  /// std::shared_ptr (the engine keeps it alive). Throws kindling::UsageError otherwise.
  virtual void attach(engine::Engine& engine, const std::string& name, const Usage& usage = Usage::kEpochWise);
  /// Removes this metric's handlers of `usage` from `engine` (and the names it stored).
  virtual void detach(engine::Engine& engine, const Usage& usage = Usage::kEpochWise);
  /// Whether compute is attached to `engine` for `usage`.
  bool is_attached(const engine::Engine& engine, const Usage& usage = Usage::kEpochWise) const;
  /// The usages for which compute is attached to `engine` (is_attached), in Usage's order.
  std::vector<Usage> attached_usages(const engine::Engine& engine) const;

  /// The handlers attach() installs (public so that users can call them as ignite's):
  /// reset (unless resuming a restored state, see load_state_dict); output_transform then
  /// update (without gradients); compute then store.
  void started(engine::Engine& engine);
  void iteration_completed(engine::Engine& engine);
  /// Stores compute()'s value in engine.state().metrics[name]: a 0-dim tensor as a number,
  /// a tensor on the CPU. A named value (ignite's mapping, e.g. MetricGroup's) is stored
  /// whole under `name` and each entry also under its own key (a 0-dim one as a number), as
  /// ignite does; throws kindling::UsageError when `name` is one of those keys.
  void completed(engine::Engine& engine, const std::string& name);

  /// Every rank's accumulators in the layout of ignite's (0.4.13 to 0.5.5) Metric.state_dict():
  /// {"__metric_state_per_rank": [rank 0's {key: value}, rank 1's, ...]} with tensors on the
  /// CPU (an undefined one as None) and counts as integers, so that a checkpoint taken
  /// mid-epoch resumes the metric exactly, and ignite's load_state_dict of the same metric
  /// (same world size) takes it. A collective in a distributed run: every rank calls it (a
  /// Checkpoint does, being called on every rank). Throws kindling::Error when the gather fails.
  StateDict state_dict() const;
  /// Restores this rank's accumulators from the entry of its rank in state_dict()'s list; also
  /// reads ignite's files of the same metric, and the layout kindling wrote before it wrote
  /// ignite's ({key: [rank 0's value, rank 1's, ...]}).
  /// The attached metric then keeps them through the reset that opens a run resumed in the
  /// middle of an epoch (so an epoch-wise value covers the whole epoch across the restart);
  /// an epoch that starts at its beginning resets as usual. A state saved at another world
  /// size is resharded by each accumulator's Reshard rule (register_state), so that the
  /// metric's value over the epoch is the one of the saved ranks' data plus what follows.
  /// Local. Throws kindling::UsageError naming the metric and the key when a key is missing,
  /// a value has the wrong type, the world size differs for an accumulator whose rule is
  /// kRefuse, or replicated values differ between the saved ranks; changes nothing then.
  void load_state_dict(const StateDict& state);

  /// How an accumulator saved at N ranks becomes this run's at M ranks (M != N).
  enum class Reshard {
    /// Resumes only at the saved world size (the rule of an accumulator registered without one).
    kRefuse,
    /// A sum over ranks (counts, totals, a confusion matrix): rank 0 takes the saved ranks'
    /// sum, the others zero, so the all-reduced value is unchanged.
    kSum,
    /// Per-rank lists of samples (EpochMetric): saved rank r's entries go to rank r % M.
    kConcatenate,
    /// The same on every rank that has seen input (a number of classes, an input type, a
    /// value averaged over ranks at each update): every rank takes it. Saved ranks that never
    /// saw input (None, 0, an empty list) do not count; differing values are refused.
    kReplicated,
    /// A maximum over ranks (MaximumAbsoluteError): every rank takes the largest saved value
    /// (elementwise for tensors), so the all-reduced maximum is unchanged.
    kMax,
  };

  const OutputTransform& output_transform() const { return output_transform_; }
  c10::Device device() const { return device_; }

 protected:
  /// (y_pred, y) from a tuple's first two tensors or the names "y_pred" / "y". Throws
  /// kindling::UsageError naming this metric and what it got.
  std::pair<at::Tensor, at::Tensor> y_pred_and_y(const Value& output) const;
  /// The sum (or other op) over ranks of a local accumulator; a copy, the argument is left
  /// as it is (ignite's sync_all_reduce). Without a distributed run: the value itself.
  /// A floating point kMax or kMin is NaN wherever any rank holds NaN (as torch.maximum),
  /// whichever rank that is. A collective: every rank calls it, in the same order.
  at::Tensor reduce(const at::Tensor& local, dist::ReduceOp op = dist::ReduceOp::kSum) const;
  double reduce(double local, dist::ReduceOp op = dist::ReduceOp::kSum) const;
  int64_t reduce(int64_t local, dist::ReduceOp op = dist::ReduceOp::kSum) const;
  /// reduce() of an accumulator whose shape only the ranks that saw data know (`seen`: this
  /// rank did; an unseen one may hold a 0-dim placeholder): an unseen rank gives the identity
  /// of `op` (0 for a sum, 1, +inf, -inf) in the others' shape. Three collectives; every rank
  /// calls it. Throws kindling::UsageError when the ranks that saw data hold different shapes
  /// (naming two of them) or one has more than 8 dimensions.
  at::Tensor reduce_to_shape(const at::Tensor& local, bool seen, dist::ReduceOp op = dist::ReduceOp::kSum) const;

  /// Registers an accumulator that state_dict() saves and load_state_dict() restores (ignite's
  /// _state_dict_all_req_keys). Called from constructors; `slot` must live as long as the
  /// metric; `reshard` says how it resumes at another world size. A key registered twice
  /// throws kindling::InternalError.
  void register_state(const std::string& key, at::Tensor* slot, Reshard reshard = Reshard::kRefuse);
  void register_state(const std::string& key, int64_t* slot, Reshard reshard = Reshard::kRefuse);
  void register_state(const std::string& key, std::vector<at::Tensor>* slot, Reshard reshard = Reshard::kRefuse);
  /// The general form: `check` says why a saved value does not fit (empty: it fits), `set`
  /// stores one that does.
  void register_state(const std::string& key, std::function<c10::IValue()> get,
                      std::function<std::string(const c10::IValue&)> check, std::function<void(const c10::IValue&)> set,
                      Reshard reshard = Reshard::kRefuse);
  /// Registers every accumulator of `member` as this metric's, under "<prefix><key>" and with
  /// the member's Reshard rule, so that this metric's state_dict() and load_state_dict()
  /// cover the member's state (MetricGroup). `member` must live as long as this metric. A
  /// key registered twice throws kindling::InternalError.
  void register_member_state(const std::string& prefix, const Metric& member);

 private:
  struct Attachment;
  struct StateSlot {
    std::string key;
    std::function<c10::IValue()> get;
    std::function<std::string(const c10::IValue&)> check;
    std::function<void(const c10::IValue&)> set;
    Reshard reshard;
  };
  std::vector<StateSlot> state_slots_;
  bool restored_ = false;  // load_state_dict() ran and no reset since: see started()
  OutputTransform output_transform_;
  c10::Device device_;
  std::map<const void*, std::map<Usage, std::shared_ptr<Attachment>>> attachments_;  // by Engine::id()
};

}  // namespace metrics
}  // namespace kindling
