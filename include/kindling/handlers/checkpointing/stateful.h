#pragma once
/// \file
/// What a Checkpoint saves and restores: objects with a state dict (kindling::StateDict,
/// which Python's torch.load reads as a dict). Adapters for modules (DDP unwrapped),
/// optimizers, engines, the RNG states, and any object of yours with
/// `StateDict state_dict() const` and `void load_state_dict(const StateDict&)`.
///
/// \code
///   kindling::handlers::Objects to_save{{"model", stateful(model)}, {"optimizer", stateful(optimizer)},
///                                       {"trainer", stateful(trainer)}, {"rng", rng_states()}};
/// \endcode
///
/// The adapters refer to their objects (modules and what is passed as a std::shared_ptr are
/// shared, the others by reference): the objects must outlive the adapters. Everything here is local (no communication)
/// except a metric's and a comm hook's state_dict, which gather every rank's state.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/error.h"
#include "kindling/export.h"
#include "kindling/nn/ddp.h"
#include "kindling/nn/sharding.h"

namespace kindling {
namespace metrics {
class Metric;
}
namespace handlers {

/// Where an object's state lies split across the ranks: the sharded model (kindling/nn/sharding.h)
/// it is the state of, and the optimizer when it is that model's optimizer; a null model for
/// any other object. Live recovery keeps each rank's part of such objects instead of the whole.
struct ShardedPart {
  nn::ShardedModel* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
};

/// An object a checkpoint can save (state_dict) and restore (load_state_dict).
class KINDLING_API Stateful {
 public:
  virtual ~Stateful() = default;
  virtual StateDict state_dict() const = 0;
  /// Restores the state. Throws kindling::UsageError naming the key that is missing, extra
  /// (when strict) or of the wrong shape or type; must change nothing when it throws.
  virtual void load_state_dict(const StateDict& state, bool strict = true) = 0;
  /// Where the state lies split across the ranks (the adapters of a sharded model and of its
  /// optimizer say so); a null model (the default) for state held whole. Local; does not throw.
  virtual ShardedPart sharded_part() const { return {}; }
};

/// Named objects, in order.
using Objects = std::vector<std::pair<std::string, std::shared_ptr<Stateful>>>;

/// A module's parameters and buffers by their dotted names (as torch's state_dict, so a
/// kindling ResNet's file loads into torchvision's). Loading checks every key and shape
/// before copying anything. The module of a sharded model is refused (kindling::UsageError):
/// save the model, stateful(model).
KINDLING_API std::shared_ptr<Stateful> stateful(std::shared_ptr<torch::nn::Module> module);
template <typename M>
std::shared_ptr<Stateful> stateful(const torch::nn::ModuleHolder<M>& holder) {
  return stateful(std::static_pointer_cast<torch::nn::Module>(holder.ptr()));
}
/// DDP is unwrapped: the file holds the module's own names, loadable without DDP.
template <typename M>
std::shared_ptr<Stateful> stateful(const nn::DistributedDataParallel<M>& ddp) {
  return stateful(std::static_pointer_cast<torch::nn::Module>(ddp.module()));
}
/// A sharded model (kindling/nn/sharding.h) as its module's state_dict: every parameter whole,
/// then the buffers; saving gathers the shards (a collective: called on every rank, as the
/// checkpoint does), loading keeps this rank's part at any world size. In the serial model, the
/// module's. Keeps the module alive.
KINDLING_API std::shared_ptr<Stateful> stateful_sharded(std::shared_ptr<torch::nn::Module> module,
                                                        nn::ShardedModel* sharded);
template <typename M>
std::shared_ptr<Stateful> stateful(const nn::FullyShardedDataParallel<M>& model) {
  return stateful_sharded(std::static_pointer_cast<torch::nn::Module>(model.module()), model.sharded());
}
/// The optimizer of a sharded model (built on its parameters()) as the same optimizer over the
/// whole module saves itself (torch's layout, per-parameter state whole): saving gathers (a
/// collective), loading keeps this rank's parts at any world size. The model must outlive it.
KINDLING_API std::shared_ptr<Stateful> stateful_sharded(torch::optim::Optimizer& optimizer, nn::ShardedModel* sharded);
template <typename M>
std::shared_ptr<Stateful> stateful(torch::optim::Optimizer& optimizer, const nn::FullyShardedDataParallel<M>& model) {
  return stateful_sharded(optimizer, model.sharded());
}
/// An optimizer as torch's optimizer.state_dict(): {"state": {index: {...}}, "param_groups":
/// [{options..., "params": [indices]}]} for SGD, Adam and AdamW; other optimizers are saved
/// as LibTorch's own archive bytes under "torch_archive" (a uint8 tensor). An optimizer that
/// keeps its state itself (kindling::nn::SelfStatedOptimizer: ZeroRedundancyOptimizer, whose
/// state_dict is a collective, and OptimizerInBackward) gives the same layout. An optimizer of a
/// sharded model's shards is refused (kindling::UsageError): save it with stateful(optimizer, model).
KINDLING_API std::shared_ptr<Stateful> stateful(torch::optim::Optimizer& optimizer);
/// A DDP communication hook's state (PowerSgdHook: its error feedback, warm start and random
/// state; saving gathers every rank's, so it is called on every rank). Keeps the hook alive.
KINDLING_API std::shared_ptr<Stateful> stateful(std::shared_ptr<nn::CommHook> hook);
/// An engine's state_dict (ignite's keys).
KINDLING_API std::shared_ptr<Stateful> stateful(engine::Engine& engine);
/// A metric's accumulators, every rank's (Metric::state_dict: a collective, so the
/// checkpoint saving it is called on every rank, as it must be anyway); loading restores
/// this rank's. Keeps the metric alive.
KINDLING_API std::shared_ptr<Stateful> stateful(std::shared_ptr<metrics::Metric> metric);
/// Named objects saved as one entry, a dict {name: that object's state dict}: ignite's
/// `to_save={"metrics": {"accuracy": acc, "loss": loss}}`, whose file Python's ignite
/// (Checkpoint.load_objects with the same nesting) reads and which reads ignite's. Groups nest.
/// \code
///   kh::Objects to_save{{"model", kh::stateful(model)},
///                       {"metrics", kh::stateful(kh::Objects{{"accuracy", kh::stateful(acc)},
///                                                            {"loss", kh::stateful(loss)}})}};
/// \endcode
/// Saving is a collective where a member's is (a metric's); loading is local and all or
/// nothing: a member that fails puts the members loaded before it back. Throws
/// kindling::UsageError for no objects, a null one or two of one name; loading throws it
/// naming the member for a missing entry (as ignite, also when not strict), one that is not a
/// dict, an entry no member has (when strict) or what the member refuses.
KINDLING_API std::shared_ptr<Stateful> stateful(Objects objects);
/// The default CPU generator's state ("torch_cpu") and, where LibTorch has CUDA, each
/// GPU's ("torch_cuda_<i>"): what dropout and random initialisation draw from.
KINDLING_API std::shared_ptr<Stateful> rng_states();

/// Keeps the random states of rng_states() across a scope: reads them when made, puts them
/// back when destroyed (also when the scope is left by an exception). Local. The constructor
/// throws what reading a generator throws; the destructor never throws (a failure to restore
/// is written to kindling's log as an error).
class KINDLING_API RandomStateKeeper {
 public:
  RandomStateKeeper();
  ~RandomStateKeeper();
  RandomStateKeeper(const RandomStateKeeper&) = delete;
  RandomStateKeeper& operator=(const RandomStateKeeper&) = delete;

 private:
  StateDict saved_;
};

/// ignite's engine.deterministic.keep_random_state (a decorator there): `fn` wrapped so that
/// each call leaves the random states of rng_states() as they were before it, whatever `fn`
/// draws (e.g. a validation run inside training that must not shift the training's dropout
/// masks). The wrapper takes `fn`'s arguments and returns what `fn` returns (ignite's returns
/// nothing). Local; throws what `fn` throws, the states restored all the same.
/// \code
///   auto validate = kindling::handlers::keep_random_state([&] { evaluator.run(val_loader); });
///   trainer.add_event_handler(Events::EPOCH_COMPLETED, [&](Engine&) { validate(); });
/// \endcode
template <typename F>
auto keep_random_state(F fn) {
  return [fn = std::move(fn)](auto&&... args) mutable -> decltype(auto) {
    RandomStateKeeper keep;
    return fn(std::forward<decltype(args)>(args)...);
  };
}

/// A LibTorch scheduler (torch::optim::StepLR, your subclass of torch::optim::LRScheduler)
/// stepped by hand, as ignite's MNIST example steps torch's StepLR at EPOCH_COMPLETED. LibTorch's
/// constructor does not take the first step that torch's takes, so its rates lag torch's by one
/// step: step once after making it, then as in Python:
/// \code
///   auto step_lr = std::make_shared<torch::optim::StepLR>(optimizer, 1, 0.5);
///   step_lr->step();  // torch's constructor's step: epoch 0's rates
///   trainer.on(Events::EPOCH_COMPLETED, [step_lr](Engine&) { step_lr->step(); });
///   to_save.emplace_back("lr_scheduler", kindling::handlers::stateful(step_lr));
/// \endcode
/// Saved with the keys of torch's lr_scheduler.state_dict() that LibTorch knows: "last_epoch"
/// (the step count less one: N after N epochs above, as torch's), "_step_count" (the step count)
/// and "_last_lr" (the optimizer's learning rates). Loading sets the step count to last_epoch + 1
/// (a state of Python's StepLR loads too); LibTorch's schedulers scale the optimizer's current
/// rates, so restore the optimizer's state with it. Keeps the scheduler alive. Local. Throws
/// kindling::UsageError for a null scheduler; loading throws it without "last_epoch" or for one
/// below -1. (Implemented with the schedulers, src/handlers/schedulers/.)
KINDLING_API std::shared_ptr<Stateful> stateful(std::shared_ptr<torch::optim::LRScheduler> scheduler);

namespace stateful_detail {
// What the two adapters below share: `Pointer` is T* or std::shared_ptr<T>.
template <typename Pointer>
struct ObjectAdapter : Stateful {
  explicit ObjectAdapter(Pointer o) : object(std::move(o)) {}
  StateDict state_dict() const override { return object->state_dict(); }
  void load_state_dict(const StateDict& state, bool) override { object->load_state_dict(state); }
  Pointer object;
};
template <typename T>
using HasStateDict = std::void_t<decltype(std::declval<const T&>().state_dict()),
                                 decltype(std::declval<T&>().load_state_dict(std::declval<const StateDict&>()))>;
}  // namespace stateful_detail

/// Any object with `StateDict state_dict() const` and `void load_state_dict(const StateDict&)`.
template <typename T, typename = stateful_detail::HasStateDict<T>>
std::shared_ptr<Stateful> stateful(T& object) {
  return std::make_shared<stateful_detail::ObjectAdapter<T*>>(&object);
}

/// The same for such an object owned by a std::shared_ptr, as metrics are passed: a scheduler
/// (`kh::stateful(std::make_shared<kh::LRScheduler>(...))`), a handler of yours. Keeps it alive.
/// Metrics and comm hooks have their own overloads above. Throws kindling::UsageError for a
/// null pointer. Local.
template <typename T, typename = stateful_detail::HasStateDict<T>,
          typename = std::enable_if_t<!std::is_convertible<T*, metrics::Metric*>::value &&
                                      !std::is_convertible<T*, nn::CommHook*>::value>>
std::shared_ptr<Stateful> stateful(std::shared_ptr<T> object) {
  KINDLING_CHECK(object != nullptr, "kindling::handlers::stateful: the object is a null std::shared_ptr; pass the ",
                 "object to save (made with std::make_shared)");
  return std::make_shared<stateful_detail::ObjectAdapter<std::shared_ptr<T>>>(std::move(object));
}

}  // namespace handlers
}  // namespace kindling
