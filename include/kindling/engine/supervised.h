#pragma once
/// \file
/// ignite's create_supervised_trainer / create_supervised_evaluator: engines for the usual
/// supervised step over kindling::data::Example batches (data = x, target = y).
///
/// \code
///   auto model = kindling::dist::auto_model(MyNet());
///   torch::optim::SGD optimizer(model->parameters(), 0.1);
///   auto loss_fn = [](const at::Tensor& y_pred, const at::Tensor& y) { return at::cross_entropy_loss(y_pred, y); };
///   Engine trainer = create_supervised_trainer(model, optimizer, loss_fn);
///   Engine evaluator = create_supervised_evaluator(model, {{"accuracy", std::make_shared<metrics::Accuracy>()},
///                                                          {"loss", std::make_shared<metrics::Loss>(loss_fn)}});
///   trainer.on(Events::EPOCH_COMPLETED, [&](Engine&) { evaluator.run(test_loader); });
///   trainer.run(train_loader, 10);
/// \endcode
///
/// `model` is a LibTorch module holder (MyNet), a std::shared_ptr to a module, or a
/// kindling::nn::DistributedDataParallel or FullyShardedDataParallel (whose optimizer must hold its
/// parameters(): checked, kindling::UsageError); it is called as model.forward(x) when it has a
/// forward of its own (DDP), else model->forward(x). Ranks: the engines communicate only through the model (DDP's
/// gradient all-reduce, buffer broadcast) and the metrics (at EPOCH_COMPLETED), so every
/// rank runs them over its own shard.

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kindling/data/dataset.h"
#include "kindling/engine/amp.h"
#include "kindling/engine/engine.h"
#include "kindling/error.h"
#include "kindling/metrics/metric.h"
#include "kindling/options.h"
#include "kindling/timeline.h"

namespace kindling {
namespace engine {

/// (x, y) from a batch, on `device` when given (copied non-blocking when asked).
using PrepareBatch =
    std::function<std::pair<at::Tensor, at::Tensor>(const data::Example&, std::optional<c10::Device>, bool)>;

/// ignite's _prepare_batch: the batch's data and target, moved to `device` when given.
/// Local; throws what at::Tensor::to throws.
KINDLING_API std::pair<at::Tensor, at::Tensor> prepare_batch(const data::Example& batch,
                                                             std::optional<c10::Device> device, bool non_blocking);

/// The trainer's output from (x, y, y_pred, loss).
using TrainerOutputTransform =
    std::function<Value(const at::Tensor& x, const at::Tensor& y, const at::Tensor& y_pred, const at::Tensor& loss)>;
/// The evaluator's output from (x, y, y_pred).
using EvaluatorOutputTransform =
    std::function<Value(const at::Tensor& x, const at::Tensor& y, const at::Tensor& y_pred)>;

/// Options of create_supervised_trainer (chain the setters); ignite's arguments.
struct KINDLING_API SupervisedTrainerOptions {
  /// Where batches go (unset: where they are).
  KINDLING_ARG(std::optional<c10::Device>, device);

  /// Asynchronous host-to-device copies of the batch (default false).
  KINDLING_ARG(bool, non_blocking) = false;

  /// Turns a batch into (x, y) on the device (default: prepare_batch above).
  KINDLING_ARG(PrepareBatch, prepare_batch);

  /// Applied to the model's output before the loss (e.g. pick one head).
  KINDLING_ARG(std::function<at::Tensor(const at::Tensor&)>, model_transform);

  /// What the iteration returns from (x, y, y_pred, loss); default: loss.item() as a number.
  KINDLING_ARG(TrainerOutputTransform, output_transform);

  /// Accumulate gradients over this many iterations (>= 1): the loss is divided by it,
  /// zero_grad runs when (iteration - 1) % steps == 0 and step when iteration % steps == 0
  /// (iteration is the engine's global one, as ignite). With DDP the backward passes
  /// between steps skip the gradient all-reduce (no_sync).
  KINDLING_ARG(int64_t, gradient_accumulation_steps) = 1;

  /// Forward and loss under autocast (ignite's amp_mode="amp"): float16 on CUDA, bfloat16 on CPU.
  KINDLING_ARG(bool, amp) = false;

  /// Dynamic loss scaling for amp (ignite's scaler): backward on scaler->scale(loss), steps
  /// through the scaler (skipped on inf/NaN gradients), then scaler->update(). Needs amp(true).
  KINDLING_ARG(std::shared_ptr<GradScaler>, scaler);
};

/// Options of create_supervised_evaluator (chain the setters); ignite's arguments.
struct KINDLING_API SupervisedEvaluatorOptions {
  /// Where batches go (unset: where they are).
  KINDLING_ARG(std::optional<c10::Device>, device);

  /// Asynchronous host-to-device copies of the batch (default false).
  KINDLING_ARG(bool, non_blocking) = false;

  /// Turns a batch into (x, y) on the device (default: prepare_batch above).
  KINDLING_ARG(PrepareBatch, prepare_batch);

  /// Applied to the model's output before the metrics (e.g. pick one head).
  KINDLING_ARG(std::function<at::Tensor(const at::Tensor&)>, model_transform);

  /// Forward under autocast (ignite's amp_mode="amp"): float16 on CUDA, bfloat16 on CPU.
  KINDLING_ARG(bool, amp) = false;

  /// What the iteration returns from (x, y, y_pred); default: the tuple {y_pred, y}.
  KINDLING_ARG(EvaluatorOutputTransform, output_transform);
};

/// The loss: (y_pred, y) -> a 0-dim tensor (the batch mean, as ignite's Loss expects).
using LossFunction = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

/// Metrics by name, attached in this order.
using NamedMetrics = std::vector<std::pair<std::string, std::shared_ptr<metrics::Metric>>>;

namespace detail {

// A wrapper with its own forward (kindling::nn::DistributedDataParallel), as opposed to a
// module holder or pointer whose module's forward is reached through ->.
template <typename M, typename = void>
struct HasOwnForward : std::false_type {};
template <typename M>
struct HasOwnForward<M, std::void_t<decltype(std::declval<M&>().forward(std::declval<at::Tensor>()))>>
    : std::true_type {};
template <typename M, typename = void>
struct HasNoSync : std::false_type {};
template <typename M>
struct HasNoSync<M, std::void_t<decltype(std::declval<M&>().no_sync())>> : std::true_type {};

/// A model that can tell whether an optimizer steps what it trains (a sharded model's shards).
template <typename M, typename = void>
struct ChecksOptimizer : std::false_type {};
template <typename M>
struct ChecksOptimizer<M, std::void_t<decltype(std::declval<const M&>().check_optimizer(
                              std::declval<const torch::optim::Optimizer&>()))>> : std::true_type {};

template <typename Model>
at::Tensor call_model(Model& model, const at::Tensor& x) {
  if constexpr (HasOwnForward<Model>::value) {
    return model.forward(x);
  } else {
    return model->forward(x);
  }
}

/// The batch on its device, by the options' prepare_batch or the default one (a span of the
/// timeline: "prepare batch").
template <typename Options>
std::pair<at::Tensor, at::Tensor> prepare(const Options& o, const data::Example& batch) {
  timeline::Span span("prepare batch", timeline::Lane::kStep);
  return o.prepare_batch() ? o.prepare_batch()(batch, o.device(), o.non_blocking())
                           : prepare_batch(batch, o.device(), o.non_blocking());
}

/// Restores a module's train/eval mode on scope exit.
template <typename Model>
class ModeGuard {
 public:
  ModeGuard(Model& model, bool training) : model_(model), was_(model->is_training()) { model_->train(training); }
  ~ModeGuard() { model_->train(was_); }

 private:
  Model& model_;
  bool was_;
};

KINDLING_API void check_trainer_options(const SupervisedTrainerOptions& options);
KINDLING_API void attach_metrics(Engine& evaluator, const NamedMetrics& metrics);

}  // namespace detail

/// An Engine whose iteration is ignite's supervised training step: zero_grad (per the
/// accumulation steps), model in train mode, (x, y) = prepare_batch, y_pred =
/// model_transform(model(x)), loss = loss_fn(y_pred, y) / steps, backward, optimizer step
/// (per the steps; through the scaler when given), with the forward and loss under autocast
/// when amp(true); returns output_transform(x, y, y_pred, loss * steps). The engine is named
/// "trainer" (its log lines: "trainer: Epoch[1] Complete. ..."). `model` and
/// `optimizer` are used by reference: they must outlive the engine. Throws
/// kindling::UsageError for gradient_accumulation_steps < 1, or a scaler without amp. Every rank calls it (the model
/// may be DDP): with several ranks it compares amp, gradient_accumulation_steps and whether a
/// scaler is given across the world (kindling/dist/same_settings.h) and throws
/// kindling::UsageError on every rank, naming them, when they differ.
template <typename Model>
Engine create_supervised_trainer(Model model, torch::optim::Optimizer& optimizer, LossFunction loss_fn,
                                 SupervisedTrainerOptions options = SupervisedTrainerOptions()) {
  detail::check_trainer_options(options);
  KINDLING_CHECK(static_cast<bool>(loss_fn), "kindling::engine::create_supervised_trainer: loss_fn is empty");
  if constexpr (detail::ChecksOptimizer<Model>::value) model.check_optimizer(optimizer);
  Engine trainer([model, &optimizer, loss_fn = std::move(loss_fn), o = std::move(options)](
                     Engine& engine, const data::Example& batch) mutable -> Value {
    const int64_t steps = o.gradient_accumulation_steps();
    const int64_t it = engine.state().iteration;
    using timeline::Lane;
    using timeline::Span;
    if ((it - 1) % steps == 0) {
      Span span("zero_grad", Lane::kStep);
      optimizer.zero_grad();
    }
    model->train(true);
    auto xy = detail::prepare(o, batch);
    at::Tensor y_pred, loss;
    {
      Autocast autocast(o.device().value_or(xy.first.device()).type(), std::nullopt, o.amp());
      {
        Span span("forward", Lane::kStep);
        y_pred = detail::call_model(model, xy.first);
        if (o.model_transform()) y_pred = o.model_transform()(y_pred);
      }
      Span span("loss", Lane::kStep);
      loss = loss_fn(y_pred, xy.second);
      if (steps > 1) loss = loss / static_cast<double>(steps);
    }
    const bool step = it % steps == 0;
    const at::Tensor to_backward = o.scaler() ? o.scaler()->scale(loss) : loss;
    {
      Span span("backward", Lane::kStep);
      if constexpr (detail::HasNoSync<Model>::value) {
        if (!step) {
          auto guard = model.no_sync();
          to_backward.backward();
        } else {
          to_backward.backward();
        }
      } else {
        to_backward.backward();
      }
    }
    Span span("optimizer step", Lane::kStep);
    if (step && o.scaler()) {
      o.scaler()->step(optimizer);
      o.scaler()->update();
    } else if (step) {
      optimizer.step();
    }
    const at::Tensor full = steps > 1 ? loss * static_cast<double>(steps) : loss;
    if (o.output_transform()) return o.output_transform()(xy.first, xy.second, y_pred, full);
    return full.item<double>();
  });
  trainer.name = "trainer";
  return trainer;
}

/// An Engine whose iteration evaluates the model: in eval mode and without gradients,
/// (x, y) = prepare_batch, y_pred = model_transform(model(x)); returns output_transform(x,
/// y, y_pred), by default {y_pred, y}. The model's train/eval mode is restored after each
/// iteration (ignite leaves it in eval mode). `metrics` are attached in order (EpochWise).
/// The engine is named "evaluator" and logs its run lines at DEBUG (EngineLogger::quiet():
/// at the default level ignite's evaluator prints nothing, and it runs every training epoch).
/// Every rank calls it and runs it over its shard: the metrics reduce across ranks at
/// EPOCH_COMPLETED.
template <typename Model>
Engine create_supervised_evaluator(Model model, const NamedMetrics& metrics = {},
                                   SupervisedEvaluatorOptions options = SupervisedEvaluatorOptions()) {
  Engine evaluator([model, o = std::move(options)](Engine&, const data::Example& batch) mutable -> Value {
    detail::ModeGuard<Model> mode(model, false);
    at::NoGradGuard no_grad;
    auto xy = detail::prepare(o, batch);
    at::Tensor y_pred;
    {
      Autocast autocast(o.device().value_or(xy.first.device()).type(), std::nullopt, o.amp());
      timeline::Span span("forward", timeline::Lane::kStep);
      y_pred = detail::call_model(model, xy.first);
    }
    if (o.model_transform()) y_pred = o.model_transform()(y_pred);
    if (o.output_transform()) return o.output_transform()(xy.first, xy.second, y_pred);
    return {y_pred, xy.second};
  });
  detail::attach_metrics(evaluator, metrics);
  evaluator.name = "evaluator";
  evaluator.logger = EngineLogger::quiet();
  return evaluator;
}

}  // namespace engine
}  // namespace kindling
