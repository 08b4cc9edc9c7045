// setup_common_training_handlers, setup_tb_logging and setup_mlflow_logging: ignite's bundles of
// training handlers.
#include "kindling/handlers/common.h"

#include <torch/cuda.h>

#include <cctype>
#include <string>
#include <utility>

#include "kindling/detail/torch_compat.h"
#include "kindling/error.h"
#include "kindling/handlers/stopping.h"
#include "kindling/metrics/running_average.h"

#if KINDLING_TORCH_DEVICE_ALLOCATOR
#include <c10/core/CachingDeviceAllocator.h>
#endif

namespace kindling {
namespace handlers {

using engine::Engine;
using engine::Events;
using engine::Value;

std::shared_ptr<Checkpoint> gen_save_best_models_by_val_score(std::shared_ptr<DiskSaver> save_handler,
                                                              Engine& evaluator, const Objects& models,
                                                              const std::string& metric_name, int n_saved,
                                                              Engine* trainer, const std::string& tag,
                                                              double score_sign, CheckpointOptions options) {
  std::string lowered = metric_name;
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  options.filename_prefix("best")
      .n_saved(n_saved)
      .score_name(tag + "_" + lowered)
      .score_function(Checkpoint::get_default_score_fn(metric_name, score_sign));
  if (trainer) options.global_step_transform(global_step_from_engine(*trainer));
  auto best = std::make_shared<Checkpoint>(models, std::move(save_handler), std::move(options));
  best->attach(evaluator, Events::COMPLETED);
  return best;
}

std::shared_ptr<Checkpoint> save_best_model_by_val_score(const std::string& output_path, Engine& evaluator,
                                                         std::shared_ptr<Stateful> model,
                                                         const std::string& metric_name, int n_saved, Engine* trainer,
                                                         const std::string& tag, double score_sign,
                                                         CheckpointOptions options) {
  auto saver = std::make_shared<DiskSaver>(output_path, DiskSaverOptions().require_empty(false));
  return gen_save_best_models_by_val_score(std::move(saver), evaluator, {{"model", std::move(model)}}, metric_name,
                                           n_saved, trainer, tag, score_sign, std::move(options));
}

std::shared_ptr<EarlyStopping> add_early_stopping_by_val_score(int patience, Engine& evaluator, Engine& trainer,
                                                               const std::string& metric_name, double score_sign) {
  auto stopping =
      std::make_shared<EarlyStopping>(patience, Checkpoint::get_default_score_fn(metric_name, score_sign), trainer);
  evaluator.on(Events::COMPLETED, [stopping](Engine& e) { (*stopping)(e); });
  return stopping;
}

void empty_cuda_cache(Engine&) {
  if (!torch::cuda::is_available()) return;
#if KINDLING_TORCH_DEVICE_ALLOCATOR
  c10::getDeviceAllocator(c10::kCUDA)->emptyCache();
#else
  throw UsageError(
      "kindling::handlers::empty_cuda_cache: this LibTorch (1.x) has no device-generic allocator to empty; call "
      "c10::cuda::CUDACachingAllocator::emptyCache() in a handler of your own, or build with LibTorch 2.x");
#endif
}

std::shared_ptr<CommonHandlers> setup_common_training_handlers(Engine& trainer, const CommonTrainingOptions& o) {
  const char* where = "kindling::handlers::setup_common_training_handlers";
  KINDLING_CHECK(!(o.output_path() && o.save_handler()), where,
                 ": arguments output_path and save_handler are mutually exclusive; give one of them");
  KINDLING_CHECK(o.to_save().empty() || o.output_path() || o.save_handler(), where,
                 ": to_save is given, so output_path or save_handler should be given too (where to write)");
  KINDLING_CHECK(o.save_every_iters() >= 1 && o.log_every_iters() >= 1, where,
                 ": save_every_iters and log_every_iters must be at least 1, got ", o.save_every_iters(), " and ",
                 o.log_every_iters(), "; pass iteration counts (the defaults are 1000 and 100)");
  auto made = std::make_shared<CommonHandlers>();
  if (o.train_sampler()) {
    auto sampler = o.train_sampler();
    trainer.on(Events::EPOCH_STARTED, [sampler](Engine& e) { sampler->set_epoch(e.state().epoch - 1); });
  }
  if (o.stop_on_nan()) trainer.on(Events::ITERATION_COMPLETED, TerminateOnNan());
  if (o.lr_scheduler()) o.lr_scheduler()->attach(trainer, Events::ITERATION_STARTED);
  for (std::size_t i = 0; i < o.output_names().size(); ++i) {
    const std::string name = o.output_names()[i];
    const bool first = i == 0;
    auto average = metrics::RunningAverage::of_output([name, first](const Value& out) -> Value {
      if (out.is_named()) return out[name];
      KINDLING_CHECK(first && (out.is_number() || out.is_tensor()),
                     "kindling::handlers::"
                     "setup_common_training_handlers: output name '",
                     name, "' is not in the output ", out.to_string(),
                     "; a number or tensor output has one name, named tensors one per name");
      return out;
    });
    average->attach(trainer, name);
  }
  if (o.with_pbars()) {
    made->progress_bar = std::make_shared<ProgressBar>(ProgressBarOptions().every(o.log_every_iters()));
    // Updated every iteration: the bar's own `every` is the one filter, counted within the epoch
    // as ignite's bar counts (a second filter over the whole run printed only where both met).
    made->progress_bar->attach(trainer, o.output_names(), {}, Events::ITERATION_COMPLETED);
  }
  if (!o.to_save().empty()) {
    auto saver = o.save_handler()
                     ? o.save_handler()
                     : std::make_shared<DiskSaver>(*o.output_path(), DiskSaverOptions().require_empty(false));
    made->checkpoint = std::make_shared<Checkpoint>(
        o.to_save(), saver,
        CheckpointOptions().filename_prefix("training").n_saved(o.n_saved()).include_self(o.checkpoint_include_self()));
    made->checkpoint->attach(trainer, Events::ITERATION_COMPLETED.every(o.save_every_iters()));
  }
  trainer.on(Events::COMPLETED, [made] {});  // the trainer keeps the handlers alive
  return made;
}

namespace {

// ignite's setup_any_logging: the arguments checked (before the logger exists: a misuse makes
// no file and no run), then the logger `make` returns with the trainer's, the optimizers' and
// the evaluators' handlers attached.
template <typename Make>
auto setup_any_logging(const char* where, const Make& make, Engine& trainer,
                       const std::map<std::string, torch::optim::Optimizer*>& optimizers,
                       const std::map<std::string, Engine*>& evaluators, int64_t log_every_iters) {
  KINDLING_CHECK(log_every_iters >= 1, where, ": log_every_iters must be at least 1, got ", log_every_iters,
                 "; pass the number of iterations between two logged values (default 100; 1 logs every iteration)");
  for (const auto& [name, optimizer] : optimizers) {
    KINDLING_CHECK(optimizer != nullptr, where, ": optimizer '", name, "' is a null pointer; pass &optimizer");
  }
  for (const auto& [name, evaluator] : evaluators) {
    KINDLING_CHECK(evaluator != nullptr, where, ": evaluator '", name, "' is a null pointer; pass &evaluator");
    KINDLING_CHECK(!name.empty(), where, ": an evaluator has an empty name; name it, e.g. \"validation\" (its tag)");
  }
  auto logger = make();
  logger->attach_output_handler(trainer, Events::ITERATION_COMPLETED.every(log_every_iters), "training", {"all"});
  for (const auto& [name, optimizer] : optimizers) {
    logger->attach_opt_params_handler(trainer, Events::ITERATION_STARTED.every(log_every_iters), *optimizer, "lr",
                                      name.empty() ? std::nullopt : std::optional<std::string>(name));
  }
  for (const auto& [name, evaluator] : evaluators) {
    logger->attach_output_handler(*evaluator, Events::COMPLETED, name, {"all"}, {}, global_step_from_engine(trainer));
  }
  return logger;
}

}  // namespace

std::unique_ptr<TensorboardLogger> setup_tb_logging(const std::string& output_path, Engine& trainer,
                                                    const std::map<std::string, torch::optim::Optimizer*>& optimizers,
                                                    const std::map<std::string, Engine*>& evaluators,
                                                    int64_t log_every_iters) {
  return setup_any_logging(
      "kindling::handlers::setup_tb_logging", [&] { return std::make_unique<TensorboardLogger>(output_path); }, trainer,
      optimizers, evaluators, log_every_iters);
}

std::unique_ptr<MLflowLogger> setup_mlflow_logging(Engine& trainer,
                                                   const std::map<std::string, torch::optim::Optimizer*>& optimizers,
                                                   const std::map<std::string, Engine*>& evaluators,
                                                   int64_t log_every_iters, const std::string& tracking_uri,
                                                   const MLflowLogger::RunOptions& run) {
  return setup_any_logging(
      "kindling::handlers::setup_mlflow_logging", [&] { return std::make_unique<MLflowLogger>(tracking_uri, run); },
      trainer, optimizers, evaluators, log_every_iters);
}

}  // namespace handlers
}  // namespace kindling
