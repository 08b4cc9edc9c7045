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
/// The adapters refer to their objects (modules are shared, the others by reference): the
/// objects must outlive the adapters. Everything here is local (no communication) except a
/// metric's and a comm hook's state_dict, which gather every rank's state.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/nn/ddp.h"

namespace kindling {
namespace metrics {
class Metric;
}
namespace handlers {

/// An object a checkpoint can save (state_dict) and restore (load_state_dict).
class KINDLING_API Stateful {
 public:
  virtual ~Stateful() = default;
  virtual StateDict state_dict() const = 0;
  /// Restores the state. Throws kindling::UsageError naming the key that is missing, extra
  /// (when strict) or of the wrong shape or type; must change nothing when it throws.
  virtual void load_state_dict(const StateDict& state, bool strict = true) = 0;
};

/// Named objects, in order.
using Objects = std::vector<std::pair<std::string, std::shared_ptr<Stateful>>>;

/// A module's parameters and buffers by their dotted names (as torch's state_dict, so a
/// kindling ResNet's file loads into torchvision's). Loading checks every key and shape
/// before copying anything.
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
/// An optimizer as torch's optimizer.state_dict(): {"state": {index: {...}}, "param_groups":
/// [{options..., "params": [indices]}]} for SGD, Adam and AdamW; other optimizers are saved
/// as LibTorch's own archive bytes under "torch_archive" (a uint8 tensor). An optimizer that
/// keeps its state itself (kindling::nn::SelfStatedOptimizer: ZeroRedundancyOptimizer, whose
/// state_dict is a collective, and OptimizerInBackward) gives the same layout.
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

/// Any object with `StateDict state_dict() const` and `void load_state_dict(const StateDict&)`.
template <typename T, typename = decltype(std::declval<const T&>().state_dict()),
          typename = decltype(std::declval<T&>().load_state_dict(std::declval<const StateDict&>()))>
std::shared_ptr<Stateful> stateful(T& object) {
  struct Adapter : Stateful {
    explicit Adapter(T& o) : object(o) {}
    StateDict state_dict() const override { return object.state_dict(); }
    void load_state_dict(const StateDict& state, bool) override { object.load_state_dict(state); }
    T& object;
  };
  return std::make_shared<Adapter>(object);
}

}  // namespace handlers
}  // namespace kindling
