#pragma once
/// \file
/// setup_common_training_handlers (ignite's): the handlers most trainers want, in one call:
/// stop on NaN, an LR schedule, running averages of the output, a progress bar on rank 0 and
/// a training checkpoint every N iterations.
///
/// \code
///   auto common = kindling::handlers::setup_common_training_handlers(
///       trainer, kindling::handlers::CommonTrainingOptions()
///                    .to_save({{"trainer", stateful(trainer)}, {"model", stateful(model)}, {"optimizer",
///                    stateful(optimizer)}})
///                    .save_every_iters(200).output_path(out).lr_scheduler(scheduler).output_names({"batch_loss"}));
///   ... common->checkpoint->last_checkpoint() ...
/// \endcode
///
/// setup_tb_logging and setup_mlflow_logging (ignite's common.setup_tb_logging and
/// setup_mlflow_logging): a TensorboardLogger or an MLflowLogger with the trainer's metrics, the
/// optimizers' learning rates and the evaluators' metrics attached.
///
/// Ranks: every rank calls them (the checkpoint is written by its saver's rank, the bar and
/// the TensorBoard file by rank 0).

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/data/sampler.h"
#include "kindling/engine/engine.h"
#include "kindling/export.h"
#include "kindling/options.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/handlers/schedulers/param_scheduler.h"
#include "kindling/handlers/loggers/mlflow.h"
#include "kindling/handlers/loggers/progress_bar.h"
#include "kindling/handlers/loggers/tensorboard.h"
#include "kindling/handlers/stopping.h"

namespace kindling {
namespace handlers {

/// Options of setup_common_training_handlers (chain the setters); ignite's arguments.
struct KINDLING_API CommonTrainingOptions {
  /// Its set_epoch(epoch - 1) at every EPOCH_STARTED (the Engine already does this for a
  /// kindling DataLoader's own sampler; this is for a sampler used elsewhere).
  KINDLING_ARG(std::shared_ptr<data::Sampler>, train_sampler);

  /// Objects of the training checkpoint (file prefix "training").
  KINDLING_ARG(Objects, to_save);

  /// Iterations between training checkpoints (default 1000).
  KINDLING_ARG(int64_t, save_every_iters) = 1000;

  /// Folder of the checkpoint (a DiskSaver that accepts an existing folder); or save_handler.
  KINDLING_ARG(std::optional<std::string>, output_path);

  /// Where the training checkpoint writes, instead of output_path.
  KINDLING_ARG(std::shared_ptr<DiskSaver>, save_handler);

  /// Checkpoints kept (default 2).
  KINDLING_ARG(int, n_saved) = 2;

  /// The training checkpoint also saves its own list of kept files (key "checkpointer",
  /// CheckpointOptions::include_self; default false). Loading it back into `checkpoint`
  /// after a restart makes n_saved count the files of every attempt.
  KINDLING_ARG(bool, checkpoint_include_self) = false;

  /// Stepped at every ITERATION_STARTED.
  KINDLING_ARG(std::shared_ptr<ParamScheduler>, lr_scheduler);

  /// Running averages (RunningBatchWise, alpha 0.98) of these outputs, stored under the same
  /// names: a number output gives the first name, named tensors each name.
  KINDLING_ARG(std::vector<std::string>, output_names);

  /// A ProgressBar on the trainer with the running averages (default true).
  KINDLING_ARG(bool, with_pbars) = true;

  /// The bar's `every` (default 100): without a terminal it prints a line every this many
  /// iterations of each epoch; on a terminal it redraws at every iteration.
  KINDLING_ARG(int64_t, log_every_iters) = 100;

  /// TerminateOnNan on the trainer (default true).
  KINDLING_ARG(bool, stop_on_nan) = true;
};

/// What setup_common_training_handlers made (the trainer keeps it alive too).
struct KINDLING_API CommonHandlers {
  std::shared_ptr<Checkpoint> checkpoint;     // null without to_save
  std::shared_ptr<ProgressBar> progress_bar;  // null without with_pbars
};

/// Attaches the handlers to `trainer`. Throws kindling::UsageError for to_save without an
/// output_path or save_handler, both of these, save_every_iters or log_every_iters < 1.
/// Every rank calls it.
KINDLING_API std::shared_ptr<CommonHandlers> setup_common_training_handlers(engine::Engine& trainer,
                                                                            const CommonTrainingOptions& options);

/// ignite's common.gen_save_best_models_by_val_score: a Checkpoint of `models` through
/// `save_handler` that keeps the `n_saved` best by the evaluator's metric `metric_name` times
/// `score_sign` (-1 where lower is better, such as a loss), attached at the evaluator's COMPLETED;
/// files "best_<name>_<step>_<tag>_<metric_name lowercased>=<score>.pt", the step being the
/// trainer's epoch when `trainer` is given (it must outlive the checkpoint), else the evaluator's.
/// `options` carries other Checkpoint options (filename_pattern, greater_or_equal,
/// include_self); its filename_prefix, n_saved, score_name, score_function and
/// global_step_transform are set here, as ignite's. Throws kindling::UsageError as Checkpoint's
/// constructor and get_default_score_fn do; the score function throws, at the evaluator's
/// COMPLETED, naming the metrics it has when `metric_name` is missing. Every rank calls it.
KINDLING_API std::shared_ptr<Checkpoint> gen_save_best_models_by_val_score(
    std::shared_ptr<DiskSaver> save_handler, engine::Engine& evaluator, const Objects& models,
    const std::string& metric_name, int n_saved = 3, engine::Engine* trainer = nullptr, const std::string& tag = "val",
    double score_sign = 1.0, CheckpointOptions options = CheckpointOptions());

/// ignite's common.save_best_model_by_val_score: gen_save_best_models_by_val_score of one
/// model (`stateful(model)`), saved as "model", into the folder `output_path` (a DiskSaver with
/// require_empty(false), made if missing). Throws as gen_save_best_models_by_val_score and
/// DiskSaver do. Every rank calls it.
KINDLING_API std::shared_ptr<Checkpoint> save_best_model_by_val_score(
    const std::string& output_path, engine::Engine& evaluator, std::shared_ptr<Stateful> model,
    const std::string& metric_name, int n_saved = 3, engine::Engine* trainer = nullptr, const std::string& tag = "val",
    double score_sign = 1.0, CheckpointOptions options = CheckpointOptions());

/// ignite's common.add_early_stopping_by_val_score: an EarlyStopping of `trainer` (which must
/// outlive it) on the evaluator's metric `metric_name` times `score_sign`, called at the
/// evaluator's COMPLETED (the evaluator keeps it alive). Throws kindling::UsageError for
/// patience < 1 or a score_sign other than 1 or -1. Every rank calls it (each rank decides on
/// the evaluator's metrics, which are the same on every rank).
KINDLING_API std::shared_ptr<EarlyStopping> add_early_stopping_by_val_score(int patience, engine::Engine& evaluator,
                                                                            engine::Engine& trainer,
                                                                            const std::string& metric_name,
                                                                            double score_sign = 1.0);

/// ignite's common.empty_cuda_cache, a handler (`trainer.on(Events::EPOCH_COMPLETED,
/// empty_cuda_cache)`): returns the CUDA caching allocator's unused blocks to the driver, on the
/// current device. Does nothing where LibTorch has no CUDA or no GPU is present (as
/// torch.cuda.empty_cache()). Local. Throws kindling::UsageError on a LibTorch 1.x with CUDA
/// (no device-generic allocator there: call c10::cuda::CUDACachingAllocator::emptyCache()).
KINDLING_API void empty_cuda_cache(engine::Engine& engine);

/// ignite's common.setup_tb_logging: a TensorboardLogger writing in `output_path` with
/// - the trainer's metrics (e.g. setup_common_training_handlers' running averages) as
///   "training/<name>" every `log_every_iters` iterations (ITERATION_COMPLETED);
/// - each optimizer's learning rate every `log_every_iters` iterations (ITERATION_STARTED),
///   as "lr/group_<i>" for the name "" and "<name>/lr/group_<i>" otherwise;
/// - each evaluator's metrics at its COMPLETED as "<name>/<metric>", at the trainer's epoch
///   (global_step_from_engine(trainer)).
/// The optimizers and evaluators must outlive the logger's handlers. Throws
/// kindling::UsageError for log_every_iters < 1 or a null pointer (naming its key), and what
/// TensorboardLogger's constructor throws. Every rank calls it; rank 0 writes.
/// Keep the returned logger until the trainer's last run ends, then close it (or let it go):
/// the handlers stay attached, and once the logger is gone they log nothing (rank 0 warns
/// once; see "Lifetimes" in tensorboard.h), hence [[nodiscard]].
[[nodiscard]] KINDLING_API std::unique_ptr<TensorboardLogger> setup_tb_logging(
    const std::string& output_path, engine::Engine& trainer,
    const std::map<std::string, torch::optim::Optimizer*>& optimizers = {},
    const std::map<std::string, engine::Engine*>& evaluators = {}, int64_t log_every_iters = 100);

/// ignite's common.setup_mlflow_logging: an MLflowLogger of the server `tracking_uri` ("":
/// MLFLOW_TRACKING_URI) and run `run` (mlflow.h), with setup_tb_logging's handlers; the keys are
/// ignite's ("training <metric>", "lr group_<i>", "<name> lr group_<i>", "<evaluator> <metric>").
/// Throws what setup_tb_logging throws for its arguments (before any run is made) and what
/// MLflowLogger's constructor throws. Every rank calls it; rank 0 talks to the server. Keep the
/// returned logger until the trainer's last run ends, then close it (the run is then FINISHED).
[[nodiscard]] KINDLING_API std::unique_ptr<MLflowLogger> setup_mlflow_logging(
    engine::Engine& trainer, const std::map<std::string, torch::optim::Optimizer*>& optimizers = {},
    const std::map<std::string, engine::Engine*>& evaluators = {}, int64_t log_every_iters = 100,
    const std::string& tracking_uri = "", const MLflowLogger::RunOptions& run = {});

}  // namespace handlers
}  // namespace kindling
