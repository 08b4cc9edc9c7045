#pragma once
/// \file
/// EMAHandler (ignite's): keeps an exponential moving average of a model's weights in a copy
/// of the model, updated at an engine's events, to evaluate or save instead of the raw weights.
///
/// \code
///   namespace kh = kindling::handlers;
///   auto ema = std::make_shared<kh::EMAHandler>(model, kh::EMAHandlerOptions().momentum(0.0002)
///                                                   .momentum_warmup(0.0001).warmup_iters(10000));
///   ema->attach(trainer);  // Events::ITERATION_COMPLETED; trainer.state().attributes["ema_momentum"]
///   auto ema_net = ema->ema_model_as<NetImpl>();  // evaluate it: ema_net->forward(x)
///   kh::Objects to_save{{"model", kh::stateful(model)}, {"ema_model", kh::stateful(ema->ema_model())}};
/// \endcode
///
/// At each event it is attached to, with m the momentum for the engine's iteration i:
///   ema_param = (1 - m) * ema_param + m * param     (every parameter)
///   ema_buffer = buffer                              (every buffer is copied, as ignite does)
/// Without warm-up m = momentum (default 0.0002). With momentum_warmup and warmup_iters, m goes
/// linearly from momentum_warmup at iteration 1 to momentum at iteration warmup_iters and stays
/// there: m = min(momentum, momentum_warmup + (momentum - momentum_warmup) * (i - 1) /
/// max(1, warmup_iters - 1)) (so with warmup_iters 1, momentum from iteration 2). The iteration
/// is the engine's (State::iteration), also when the handler runs every k iterations.
///
/// Which ignite: the momentum rule above is ignite 0.4.6 and 0.4.7's (EMAHandler._get_momentum
/// over engine.state.iteration); attach() follows current ignite (0.4.8 up to 0.6.0), which
/// warns instead of failing when the attribute is already in the state. Differences from
/// current ignite, whose warm-up is a LambdaStateScheduler over EMAWarmUp:
/// - the warm-up counts engine iterations here; ignite counts the handler's own calls since
///   attach (its scheduler's event_index, 1 at the first call). They differ with a filter
///   (every(5): here the warm-up ends at iteration warmup_iters, in ignite after warmup_iters
///   calls, i.e. iteration 5 * warmup_iters) and after a resume (here the restored iteration
///   goes on with the warm-up; ignite starts it again unless its scheduler's state is loaded);
/// - attach() sets the attribute to 0.0 when it is missing (ignite 0.4.6 / 0.4.7; current
///   ignite sets momentum), and leaves a value already there until the first event;
/// - ignite's warm-up scheduler always writes engine.state.ema_momentum whatever `name` is, so
///   under another name its updates use the constant momentum; here the attribute `name`
///   holds the momentum each update uses;
/// - current ignite accepts a momentum_warmup above momentum (the momentum then decreases) and
///   ignores a momentum_warmup or warmup_iters given alone; both are refused here, as the
///   0.4.6 checks refuse the first;
/// - buffers follow the model as with ignite's "copy" (0.4.6's only rule, handle_buffers'
///   default since 0.4.10), but as copies: ignite's assignment makes the EMA model's buffers
///   share the model's storage. handle_buffers "update" / "ema_train" are not offered, nor
///   warn_if_exists (the warning is a log line, silenced with the log level).
///
/// The EMA model is a deep copy of the model made at construction, in eval mode, with
/// parameters that do not require gradients, on the model's devices. The copy is the module's
/// clone() (torch::nn::Cloneable: kindling's models, LibTorch's layers and the modules you
/// derive from Cloneable). For a module that is not Cloneable pass a factory that builds a
/// module of the same architecture: the handler overwrites its weights and buffers with the
/// model's. Save and restore it like any module (stateful(ema_model())); evaluate it like the
/// model (ema_model_as<NetImpl>()).
///
/// Ranks: local, nothing communicates. Given a DistributedDataParallel model the handler
/// averages its module(). DDP keeps the ranks' parameters equal, so the ranks' EMA parameters
/// stay equal without communication. Buffers are this rank's: with DDP's broadcast_buffers
/// (default) they are rank 0's at the start of each forward, which then updates them from the
/// rank's own batch, so BatchNorm statistics can differ slightly between ranks, as the online
/// model's do (sync_batchnorm makes them equal). A Checkpoint saves rank 0's.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kindling/engine/engine.h"
#include "kindling/error.h"
#include "kindling/export.h"
#include "kindling/nn/ddp.h"
#include "kindling/options.h"

namespace kindling {
namespace handlers {

/// Options of EMAHandler (chain the setters): ignite's arguments and defaults.
class KINDLING_API EMAHandlerOptions {
 public:
  /// The momentum after the warm-up, in (0, 1) (default 0.0002): the weight of the newest
  /// parameters in each update.
  KINDLING_ARG(double, momentum) = 0.0002;

  /// The momentum at iteration 1, in (0, momentum]; unset (default): no warm-up. Set it
  /// together with warmup_iters.
  KINDLING_ARG(std::optional<double>, momentum_warmup);

  /// Iterations (>= 1) over which the momentum goes linearly from momentum_warmup to
  /// momentum; unset (default): no warm-up. Set it together with momentum_warmup.
  KINDLING_ARG(std::optional<int64_t>, warmup_iters);
};

/// ignite's EMAHandler; see the file comment for the update, the copy and the ranks.
class KINDLING_API EMAHandler : public std::enable_shared_from_this<EMAHandler> {
 public:
  /// Builds a fresh module of the model's architecture (for modules that are not Cloneable).
  using ModuleFactory = std::function<std::shared_ptr<torch::nn::Module>()>;

  /// Copies `model` into the EMA model: with make_copy when given (its module's parameters and
  /// buffers must have the model's names, shapes, dtypes and devices; their values are
  /// overwritten), else with model->clone(). Throws kindling::UsageError for a null model, a
  /// momentum outside (0, 1), a momentum_warmup outside (0, momentum], warmup_iters < 1, only
  /// one of momentum_warmup / warmup_iters, a model that is not Cloneable without make_copy (the
  /// message says both remedies), or a factory that returns null, the model itself, or a module
  /// that does not match. Local.
  explicit EMAHandler(std::shared_ptr<torch::nn::Module> model, const EMAHandlerOptions& options = EMAHandlerOptions(),
                      ModuleFactory make_copy = {});
  /// The same for a module holder (torch::nn::Linear, a TORCH_MODULE of yours).
  template <typename M>
  explicit EMAHandler(const torch::nn::ModuleHolder<M>& model, const EMAHandlerOptions& options = EMAHandlerOptions(),
                      ModuleFactory make_copy = {})
      : EMAHandler(std::static_pointer_cast<torch::nn::Module>(model.ptr()), options, std::move(make_copy)) {}
  /// The same for a DistributedDataParallel model: the EMA follows its module() (ignite's rule).
  template <typename M>
  explicit EMAHandler(const nn::DistributedDataParallel<M>& model,
                      const EMAHandlerOptions& options = EMAHandlerOptions(), ModuleFactory make_copy = {})
      : EMAHandler(std::static_pointer_cast<torch::nn::Module>(model.module()), options, std::move(make_copy)) {}

  /// Adds a handler of `event` on `engine` (default Events::ITERATION_COMPLETED) that sets
  /// engine.state().attributes[name] to momentum_at(iteration), then calls update() with it.
  /// The attribute is created with 0.0 when missing. When the state already has it (restored
  /// by a resume, or written by another handler), it is kept and a warning is logged (one line
  /// per call, on each rank that calls it), as current ignite does; give each EMA handler its
  /// own name. Attach it to the trainer on every rank. The engine keeps the handler alive.
  /// Throws kindling::UsageError unless a std::shared_ptr owns the handler.
  engine::HandlerHandle attach(engine::Engine& engine, const std::string& name = "ema_momentum",
                               const engine::EventsList& event = engine::Events::ITERATION_COMPLETED);

  /// The momentum for the engine's iteration `iteration` (from 1; see the file comment).
  /// Throws kindling::UsageError for iteration < 1.
  double momentum_at(int64_t iteration) const;
  /// One update with momentum `momentum`: parameters averaged, buffers copied (no autograd).
  /// Throws kindling::UsageError when the model's parameters or buffers no longer match the EMA
  /// model's in number or device (moved after the handler was built: build it after moving, or
  /// move ema_model() too). Local.
  void update(double momentum);

  /// The averaged copy (a torch::nn::Module); hand it to stateful() to checkpoint it.
  const std::shared_ptr<torch::nn::Module>& ema_model() const { return ema_model_; }
  /// The averaged copy as its own class, e.g. ema_model_as<NetImpl>() for NetImpl::forward.
  /// Throws kindling::UsageError when the copy is not an M.
  template <typename M>
  std::shared_ptr<M> ema_model_as() const {
    auto typed = std::dynamic_pointer_cast<M>(ema_model_);
    KINDLING_CHECK(typed != nullptr, "kindling::handlers::EMAHandler::ema_model_as: the EMA model is a ",
                   ema_model_->name(), ", not the class asked for; ask for the model's own class (e.g. NetImpl for a ",
                   "TORCH_MODULE(Net))");
    return typed;
  }
  /// The online model tracked (the module of a DDP model).
  const std::shared_ptr<torch::nn::Module>& model() const { return model_; }
  /// The momentum after the warm-up (EMAHandlerOptions::momentum). Local; does not throw.
  double momentum() const { return options_.momentum(); }
  /// The momentum at iteration 1 of the warm-up; unset without warm-up. Local; does not throw.
  const std::optional<double>& momentum_warmup() const { return options_.momentum_warmup(); }
  /// The iteration from which the momentum is momentum(); unset without warm-up. Local; does
  /// not throw.
  const std::optional<int64_t>& warmup_iters() const { return options_.warmup_iters(); }

 private:
  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<torch::nn::Module> ema_model_;
  EMAHandlerOptions options_;
};

}  // namespace handlers
}  // namespace kindling
