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
/// Ranks: every rank calls it (the checkpoint is written by its saver's rank, the bar by rank 0).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/data/sampler.h"
#include "kindling/engine/engine.h"
#include "kindling/export.h"
#include "kindling/handlers/checkpoint.h"
#include "kindling/handlers/param_scheduler.h"
#include "kindling/handlers/progress_bar.h"

namespace kindling {
namespace handlers {

/// Options of setup_common_training_handlers (chain the setters); ignite's arguments.
struct KINDLING_API CommonTrainingOptions {
  /// Its set_epoch(epoch - 1) at every EPOCH_STARTED (the Engine already does this for a
  /// kindling DataLoader's own sampler; this is for a sampler used elsewhere).
  CommonTrainingOptions& train_sampler(std::shared_ptr<data::Sampler> v) {
    train_sampler_ = std::move(v);
    return *this;
  }
  /// Objects of the training checkpoint (file prefix "training").
  CommonTrainingOptions& to_save(Objects v) {
    to_save_ = std::move(v);
    return *this;
  }
  CommonTrainingOptions& save_every_iters(int64_t v) {
    save_every_iters_ = v;
    return *this;
  }
  /// Folder of the checkpoint (a DiskSaver that accepts an existing folder); or save_handler.
  CommonTrainingOptions& output_path(std::string v) {
    output_path_ = std::move(v);
    return *this;
  }
  CommonTrainingOptions& save_handler(std::shared_ptr<DiskSaver> v) {
    save_handler_ = std::move(v);
    return *this;
  }
  /// Checkpoints kept (default 2).
  CommonTrainingOptions& n_saved(int v) {
    n_saved_ = v;
    return *this;
  }
  /// The training checkpoint also saves its own list of kept files (key "checkpointer",
  /// CheckpointOptions::include_self; default false). Loading it back into `checkpoint`
  /// after a restart makes n_saved count the files of every attempt.
  CommonTrainingOptions& checkpoint_include_self(bool v) {
    checkpoint_include_self_ = v;
    return *this;
  }
  /// Stepped at every ITERATION_STARTED.
  CommonTrainingOptions& lr_scheduler(std::shared_ptr<ParamScheduler> v) {
    lr_scheduler_ = std::move(v);
    return *this;
  }
  /// Running averages (RunningBatchWise, alpha 0.98) of these outputs, stored under the same
  /// names: a number output gives the first name, named tensors each name.
  CommonTrainingOptions& output_names(std::vector<std::string> v) {
    output_names_ = std::move(v);
    return *this;
  }
  CommonTrainingOptions& with_pbars(bool v) {
    with_pbars_ = v;
    return *this;
  }
  /// The bar is redrawn every this many iterations (default 100).
  CommonTrainingOptions& log_every_iters(int64_t v) {
    log_every_iters_ = v;
    return *this;
  }
  CommonTrainingOptions& stop_on_nan(bool v) {
    stop_on_nan_ = v;
    return *this;
  }

  std::shared_ptr<data::Sampler> train_sampler_;
  Objects to_save_;
  int64_t save_every_iters_ = 1000;
  std::optional<std::string> output_path_;
  std::shared_ptr<DiskSaver> save_handler_;
  int n_saved_ = 2;
  bool checkpoint_include_self_ = false;
  std::shared_ptr<ParamScheduler> lr_scheduler_;
  std::vector<std::string> output_names_;
  bool with_pbars_ = true;
  int64_t log_every_iters_ = 100;
  bool stop_on_nan_ = true;
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

}  // namespace handlers
}  // namespace kindling
