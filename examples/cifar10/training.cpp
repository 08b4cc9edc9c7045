// The tutorial's training function, step for step: seed + rank, a logger, basic info,
// the run folder (rank 0 makes it, every rank learns it), the data read by rank 0 first,
// auto_dataloader / auto_model / auto_optim, SGD with Nesterov, warm-up then linear decay
// (PiecewiseLinear), a trainer with the common training handlers, train and test
// evaluators every validate_every epochs and at the end, the two best models by test
// accuracy, TensorBoard logs (plus JSON lines and an HTML report), resume_from and
// stop_iteration.
#include "training.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <kindling/config.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/dist/launch_env.h>
#include <kindling/engine/amp.h>
#include <kindling/engine/supervised.h>
#include <kindling/handlers/checkpointing/checkpoint.h>
#include <kindling/handlers/common.h>
#include <kindling/handlers/checkpointing/disk_saver.h>
#include <kindling/handlers/loggers/html_report.h>
#include <kindling/handlers/loggers/json_logger.h>
#include <kindling/handlers/schedulers/param_scheduler.h>
#include <kindling/handlers/checkpointing/run_folder.h>
#include <kindling/handlers/loggers/setup_logger.h>
#include <kindling/handlers/loggers/tensorboard.h>
#include <kindling/handlers/stopping.h>
#include <kindling/metrics/accuracy.h>
#include <kindling/metrics/loss.h>
#include <kindling/models/resnet.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "dataflow.h"
#include "model.h"
#include "profile.h"
#include "resume.h"
#include "timeline.h"
#include "results.h"

namespace cifar10 {

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
namespace km = kindling::metrics;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using Clock = std::chrono::steady_clock;

namespace {

void log_basic_info(const kh::Logger& logger, const Config& config, const DataChoice& data, const std::string& why) {
  logger.info("Train " + config.model + " on " + data.dataset + " (" + data.why + ")");
  logger.info(std::string("- LibTorch version: ") + TORCH_VERSION);
  logger.info(std::string("- kindling version: ") + KINDLING_VERSION_STRING);
  logger.info("- " + why);
  std::ostringstream lines;
  lines << "Configuration:";
  for (const auto& [key, value] : describe(config)) lines << "\n\t" << key << ": " << value;
  logger.info(lines.str());
  if (kd::get_world_size() > 1) {
    logger.info("Distributed setting:\n\tbackend: " + kd::backend() + "\n\tworld size: " +
                std::to_string(kd::get_world_size()) + "\n\tnodes: " + std::to_string(kd::get_nnodes()));
  }
}

// `<output_path>/<model>_backend-<backend>-<world size>_<YYYYmmdd-HHMMSS>[-n]`, unique even
// for jobs started in the same second; after a restart, the folder this job's earlier attempt
// made, whatever its world size (kindling/handlers/checkpointing/run_folder.h). Every rank gets it (the tutorial sets it on rank 0).
kh::RunFolder make_run_folder(const kh::Logger& logger, const Config& config) {
  const std::string backend = kd::get_world_size() > 1 ? kd::backend() : std::string("none");
  kh::RunFolder run;
  try {
    // After an elastic restart at another world size the job goes on in the folder it started.
    const std::string stem = config.model + "_backend-" + backend + "-";
    run = kh::open_run_folder(config.output_path, stem + std::to_string(kd::get_world_size()), stem);
  } catch (const kindling::Error& e) {
    throw kindling::UsageError(std::string("--output_path '") + config.output_path + "': " + e.what());
  }
  logger.info((run.continued ? "Restart " + std::to_string(kd::restart_count()) + ": continuing in "
                             : std::string("Output path: ")) +
              run.path);
  return run;
}

std::shared_ptr<kh::PiecewiseLinear> get_lr_scheduler(const Config& config, torch::optim::Optimizer& optimizer,
                                                      int64_t iters_per_epoch) {
  const double lr = *config.learning_rate;
  std::vector<std::pair<int64_t, double>> milestones{{0, 0.0}};
  const int64_t warmup_end = iters_per_epoch * *config.num_warmup_epochs;
  if (warmup_end > 0) {
    milestones.push_back({warmup_end, lr});
  } else {
    milestones.front().second = lr;
  }
  milestones.push_back({std::max(warmup_end + 1, iters_per_epoch * *config.num_epochs), 0.0});
  return std::make_shared<kh::PiecewiseLinear>(optimizer, "lr", milestones);
}

std::string fixed(double v, int digits) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f", digits, v);
  return text;
}

// Intra-op threads: the node's cores shared by its ranks, unless OMP_NUM_THREADS says
// otherwise (LibTorch's own default here is 1, which leaves a lone process half the cores).
int share_the_cores() {
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(std::max(1, cores / std::max(1, kd::get_nproc_per_node())));
  }
  return at::get_num_threads();
}


// Everything one run holds, built by the phases below in the tutorial's order. It is never
// moved: the handlers attached to its engines refer to its members.
struct Job {
  Job(Config& c, const kh::Logger& l, kh::RunFolder& r) : config(c), logger(l), run(r) {}
  Config& config;
  const kh::Logger& logger;
  kh::RunFolder& run;
  std::optional<DataChoice> data;
  std::optional<kindling::StateDict> resume_state;
  std::string resume_from;
  int64_t resumed_at = 0;  // the trainer's iteration after loading resume_state
  std::optional<Dataflow> flow;
  TrainedModel model;  // DDP, or sharded with --sharding
  std::unique_ptr<torch::optim::SGD> optimizer;
  torch::optim::Optimizer* stepped = nullptr;  // `optimizer`, or DiLoCo over it (--diloco_every)
  std::shared_ptr<IterationSplit> split;  // --profile, rank 0
  kindling::engine::LossFunction criterion;
  std::shared_ptr<kh::PiecewiseLinear> lr_scheduler;
  std::shared_ptr<kindling::engine::GradScaler> scaler;
  std::optional<Engine> trainer, train_evaluator, test_evaluator;
  kh::Objects to_save;
  std::shared_ptr<kh::CommonHandlers> common;
  std::optional<kh::TensorboardLogger> tb;
  std::optional<kh::JsonLogger> json;
  std::optional<kh::HtmlReport> report;
  std::shared_ptr<kh::Timeline> timeline;  // --timeline
  Results results;
};

// The data, the information the tutorial logs, --resume_from (read before the run folder is
// made: a wrong file leaves no folder), then the run folder.
void prepare(Job& job, int threads) {
  Config& config = job.config;
  job.data = choose_data(config);  // every rank: a wrong path fails everywhere
  const std::string why = apply_dataset_defaults(config, job.data->dataset);
  log_basic_info(job.logger, config, *job.data, why);
  job.logger.info("- intra-op threads per rank: " + std::to_string(threads));
  if (!config.resume_from.empty()) {
    KINDLING_CHECK(std::filesystem::is_regular_file(path_status("--resume_from", config.resume_from)),
                   "cifar10: --resume_from '", config.resume_from,
                   "' is not a file; give a training_checkpoint_<iteration>.pt of an earlier run");
    job.resume_state = kh::Checkpoint::load_file(config.resume_from);  // every rank reads the file
  }
  job.run = make_run_folder(job.logger, config);
}

// The loaders, the model, SGD with Nesterov, the criterion, the schedule, and the trainer
// with the tutorial's output {"batch loss": loss.item()}.
void make_trainer(Job& job) {
  const Config& config = job.config;
  job.flow = get_dataflow(*job.data, config);
  const int64_t iters_per_epoch = job.flow->train.size();
  KINDLING_CHECK(iters_per_epoch > 0, "cifar10: the training split gives no batch of ", config.batch_size,
                 " samples over ", kd::get_world_size(), " rank(s) (drop_last); use a smaller --batch_size");
  const std::vector<at::Tensor> parameters = job.model.make(config, job.data->channels);
  const auto sgd_options = torch::optim::SGDOptions(*config.learning_rate)
                               .momentum(config.momentum)
                               .weight_decay(config.weight_decay)
                               .nesterov(true);
  // --profile: an SGD that marks its step, a criterion that marks the forward's end.
  job.split = config.profile && kd::get_rank() == 0 ? std::make_shared<IterationSplit>() : nullptr;
  job.optimizer = job.split ? std::make_unique<TimedSGD>(parameters, sgd_options, job.split)
                            : std::make_unique<torch::optim::SGD>(parameters, sgd_options);
  kd::auto_optim(*job.optimizer);
  job.stepped = &job.model.stepped_by(*job.optimizer, config);
  job.criterion = [](const at::Tensor& y_pred, const at::Tensor& y) { return at::cross_entropy_loss(y_pred, y); };
  if (job.split) job.criterion = job.split->timed(job.criterion);
  job.lr_scheduler = get_lr_scheduler(config, *job.stepped, iters_per_epoch);
  job.scaler = config.with_amp ? std::make_shared<kindling::engine::GradScaler>() : nullptr;
  const auto options =
      kindling::engine::SupervisedTrainerOptions()
          .device(kd::device())
          .non_blocking(true)
          .amp(config.with_amp)
          .scaler(job.scaler)
          .output_transform([](const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor& loss) {
            return Value(loss.item<double>());  // named "batch loss" by the common handlers
          });
  auto make = [&](auto& model) {
    return kindling::engine::create_supervised_trainer(model, *job.stepped, job.criterion, options);
  };
  job.trainer.emplace(job.model.visit(make));
  job.trainer->name = "trainer";
  job.trainer->logger = job.logger;  // as the tutorial: the engine's lines ("Epoch[1] Complete. ...") through it
  if (job.split) job.split->attach(*job.trainer, job.model.reducer());
}

// The common training handlers (checkpoints of to_save, the schedule, the progress bar);
// then the state to resume from: --resume_from, or after a restart the newest intact
// checkpoint in this job's own run folder, as rank 0 finds it (resume.h), with its list of
// kept files so that n_saved spans the attempts.
void attach_common_and_resume(Job& job) {
  const Config& config = job.config;
  job.to_save = {{"trainer", kh::stateful(*job.trainer)},
                 {"model", job.model.state()},
                 {"optimizer", job.model.optimizer_state(*job.stepped)},
                 {"lr_scheduler", kh::stateful(*job.lr_scheduler)}};
  if (job.scaler) job.to_save.push_back({"scaler", kh::stateful(*job.scaler)});
  if (job.model.comm_hook()) job.to_save.push_back({"comm_hook", kh::stateful(job.model.comm_hook())});
  job.common = kh::setup_common_training_handlers(
      *job.trainer, kh::CommonTrainingOptions()
                        .to_save(job.to_save)
                        .save_every_iters(config.checkpoint_every)
                        .checkpoint_include_self(true)  // n_saved across restarts
                        .output_path(job.run.path)
                        .lr_scheduler(job.lr_scheduler)
                        .output_names(config.log_every_iters > 0 ? std::vector<std::string>{"batch loss"}
                                                                 : std::vector<std::string>{})
                        .with_pbars(config.log_every_iters > 0)
                        .log_every_iters(std::max<int64_t>(1, config.log_every_iters)));
  job.resume_from = config.resume_from;
  if (job.resume_from.empty() && job.run.continued) {
    job.resume_from = checkpoint_to_resume(job.run.path);
    if (!job.resume_from.empty()) job.resume_state = kh::Checkpoint::load_file(job.resume_from);
  }
  if (!job.resume_state) return;
  kh::Objects to_load = job.to_save;
  if (job.run.continued && job.resume_state->contains("checkpointer"))
    to_load.push_back({"checkpointer", kh::stateful(*job.common->checkpoint)});
  kh::Checkpoint::load_objects(to_load, *job.resume_state, true, job.resume_from);
  job.resumed_at = job.trainer->state().iteration;
  job.logger.info("Resumed from " + job.resume_from + " at iteration " + std::to_string(job.resumed_at));
}

// Evaluators on the train and test sets (metrics reduced over the ranks), and the logs:
// TensorBoard as the tutorial, the same scalars as JSON lines and an HTML report.
void attach_evaluators_and_logs(Job& job) {
  const Config& config = job.config;
  auto make_evaluator = [&](const std::string& name) {
    auto make = [&](auto& model) {
      return kindling::engine::create_supervised_evaluator(
          model, {{"Accuracy", std::make_shared<km::Accuracy>()}, {"Loss", std::make_shared<km::Loss>(job.criterion)}},
          kindling::engine::SupervisedEvaluatorOptions().device(kd::device()).non_blocking(true).amp(config.with_amp));
    };
    Engine e = job.model.visit(make);
    e.name = name;
    // The tutorial's evaluators keep ignite's default logger, silent below WARNING; the
    // evaluation time is logged by the trainer's handler below.
    e.logger = kh::setup_logger(name, kindling::LogLevel::kWarning);
    return e;
  };
  job.train_evaluator.emplace(make_evaluator("train_evaluator"));
  job.test_evaluator.emplace(make_evaluator("test_evaluator"));
  const std::string& folder = job.run.path;
  job.tb.emplace(folder);
  job.json.emplace(folder + "/scalars.jsonl");
  job.report.emplace(folder + "/report.html",
                     config.model + " on " + job.data->dataset + ", " +
                         (kd::get_world_size() > 1 ? kd::backend() : std::string("one process")) + " x " +
                         std::to_string(kd::get_world_size()));
  job.report->set_config(describe(config));
  Engine& trainer = *job.trainer;
  for (kh::BaseLogger* sink : std::initializer_list<kh::BaseLogger*>{&*job.tb, &*job.json, &*job.report}) {
    if (config.log_every_iters > 0) {
      sink->attach_output_handler(trainer, Events::ITERATION_COMPLETED.every(config.log_every_iters), "training", {},
                                  [](const Value& out) {
                                    return std::map<std::string, double>{{"batch loss", out.number()}};
                                  });
    }
    sink->attach_opt_params_handler(
        trainer, Events::ITERATION_STARTED.every(std::max<int64_t>(1, config.log_every_iters)), *job.stepped);
    sink->attach_output_handler(*job.train_evaluator, Events::COMPLETED, "train", {"Accuracy", "Loss"}, {},
                                kh::global_step_from_engine(trainer));
    sink->attach_output_handler(*job.test_evaluator, Events::COMPLETED, "test", {"Accuracy", "Loss"}, {},
                                kh::global_step_from_engine(trainer));
  }
}

// Both sets evaluated every validate_every epochs and at the end, logged and kept for the
// table; the report redrawn after each validation.
void attach_validation(Job& job) {
  job.trainer->on(Events::EPOCH_COMPLETED.every(job.config.validate_every) | Events::COMPLETED, [&job](Engine& t) {
    if (kh::TerminateOnNan::ended_at(t)) return;  // no model worth evaluating, nor keeping as best
    const int64_t epoch = t.state().epoch;
    // At the end of a run whose last epoch was just validated (num_epochs a multiple of
    // validate_every), the tutorial evaluates the same weights again; once is enough.
    if (!job.results.validations.empty() && job.results.validations.back().epoch == epoch) return;
    // Under DiLoCo each rank trains its own weights between exchanges: the common ones are evaluated.
    if (auto* diloco = job.model.diloco()) diloco->synchronize();
    Validation v{epoch};
    for (Engine* e : {&*job.train_evaluator, &*job.test_evaluator}) {
      const bool train = e == &*job.train_evaluator;
      const auto start = Clock::now();
      e->run(train ? job.flow->train : job.flow->test);
      const auto& m = e->state().metrics;
      const double acc = m.at("Accuracy").number(), loss = m.at("Loss").number();
      (train ? v.train_accuracy : v.test_accuracy) = acc;
      (train ? v.train_loss : v.test_loss) = loss;
      job.logger.info("Epoch " + std::to_string(epoch) + " - Evaluation time (seconds): " +
                      fixed(std::chrono::duration<double>(Clock::now() - start).count(), 2) + " - " +
                      (train ? "train" : "test") + " metrics:\n\tAccuracy: " + fixed(acc, 4) +
                      "\n\tLoss: " + fixed(loss, 4));
    }
    job.results.validations.push_back(v);
    job.report->render("updated after the validation of epoch " + std::to_string(epoch));
  });
}

// Training throughput and epoch times for the table and summary.json; --timeline.
void attach_timing(Job& job) {
  Results& results = job.results;
  results.dataset = job.data->dataset;
  results.backend = kd::get_world_size() > 1 ? kd::backend() : "none";
  results.world_size = kd::get_world_size();
  results.batch_size = job.config.batch_size;
  results.output_path = job.run.path;
  if (!job.config.timeline.empty()) {
    job.timeline = attach_timeline(job.config.timeline, job.run.path + "/timeline", *job.trainer,
                                   {{&*job.train_evaluator, "train evaluator"}, {&*job.test_evaluator, "test evaluator"}});
    job.report->show_timeline(job.timeline);
  }
  struct Epoch {
    Clock::time_point start, train_end;
    int64_t iterations = 0;
  };
  auto epoch = std::make_shared<Epoch>();
  job.trainer->on(Events::EPOCH_STARTED, [epoch](Engine&) {
    epoch->start = Clock::now();
    epoch->iterations = 0;
  });
  job.trainer->on(Events::ITERATION_COMPLETED, [epoch](Engine&) {
    ++epoch->iterations;
    epoch->train_end = Clock::now();
  });
  const int64_t batch = job.config.batch_size;
  job.trainer->on(Events::EPOCH_COMPLETED, [&job, epoch, batch](Engine&) {
    Results& r = job.results;
    if (epoch->iterations > 0) {
      const double train_s = std::chrono::duration<double>(epoch->train_end - epoch->start).count();
      r.train_samples_per_s.push_back(static_cast<double>(epoch->iterations * batch) / train_s);
    }
    r.epoch_seconds.push_back(std::chrono::duration<double>(Clock::now() - epoch->start).count());
  });
}

// The two best models by test accuracy; --stop_iteration.
void attach_best_models_and_stop(Job& job) {
  std::make_shared<kh::Checkpoint>(
      kh::Objects{{"model", job.model.state()}},
      std::make_shared<kh::DiskSaver>(job.run.path, kh::DiskSaverOptions().require_empty(false)),
      kh::CheckpointOptions()
          .filename_prefix("best")
          .n_saved(2)
          .global_step_transform(kh::global_step_from_engine(*job.trainer))
          .score_name("test_accuracy")
          .score_function([](Engine& e) { return e.state().metrics.at("Accuracy").number(); }))
      ->attach(*job.test_evaluator, Events::COMPLETED);
  if (job.config.stop_iteration) {
    job.trainer->on(Events::ITERATION_COMPLETED.once(*job.config.stop_iteration), [&job](Engine& t) {
      job.logger.info("Stop training on iteration " + std::to_string(t.state().iteration));
      t.terminate();
    });
  }
}

// After the run: the logs closed; a run TerminateOnNan ended fails with no table (a rank
// that went on fails at its next collective); else peak memory of every rank, the table and
// summary.json.
void finish(Job& job) {
  const auto nan_at = kh::TerminateOnNan::ended_at(*job.trainer);
  job.tb->close();
  job.json->close();
  job.report->render(nan_at ? "stopped by TerminateOnNan at iteration " + std::to_string(*nan_at) : "run complete");
  job.report->close();
  if (nan_at) throw kindling::Error(stopped_on_nan(*nan_at, job.resume_from, job.resumed_at));
  Results& results = job.results;
  const double rss = peak_rss_mb();
  results.peak_rss_mb = kd::get_world_size() > 1 ? kd::all_gather(rss) : std::vector<double>{rss};
  if (job.split) results.iteration_split_ms = job.split->medians();
  if (kd::get_rank() != 0) return;
  write_summary(results);
  std::fprintf(stdout, "%s", table(results).c_str());
  if (job.common->checkpoint && job.common->checkpoint->last_checkpoint()) {
    std::fprintf(stdout, "Last training checkpoint: %s\n", job.common->checkpoint->last_checkpoint()->c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void training(int /*local_rank*/, Config config) {
  at::manual_seed(static_cast<uint64_t>(config.seed + kd::get_rank()));
  const int threads = share_the_cores();
  const kh::Logger logger = kh::setup_logger("CIFAR10-Training");
  kh::RunFolder run;
  try {
    Job job(config, logger, run);
    prepare(job, threads);
    make_trainer(job);
    attach_common_and_resume(job);
    attach_evaluators_and_logs(job);
    attach_validation(job);
    attach_timing(job);
    attach_best_models_and_stop(job);
    job.trainer->run(job.flow->train, *config.num_epochs);
    finish(job);
  } catch (const std::exception& e) {
    if (run.remove_if_unused()) logger.info("Removed the unused run folder " + run.path);
    logger.error(std::string("training failed: ") + e.what());
    throw;
  }
}

}  // namespace cifar10
