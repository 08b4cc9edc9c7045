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
#include <kindling/handlers/checkpoint.h>
#include <kindling/handlers/common.h>
#include <kindling/handlers/disk_saver.h>
#include <kindling/handlers/html_report.h>
#include <kindling/handlers/json_logger.h>
#include <kindling/handlers/param_scheduler.h>
#include <kindling/handlers/run_folder.h>
#include <kindling/handlers/setup_logger.h>
#include <kindling/handlers/tensorboard.h>
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
#include "profile.h"
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
// made (kindling/handlers/run_folder.h). Every rank gets it (the tutorial sets it on rank 0).
kh::RunFolder make_run_folder(const kh::Logger& logger, const Config& config) {
  const std::string backend = kd::get_world_size() > 1 ? kd::backend() : std::string("none");
  kh::RunFolder run;
  try {
    run = kh::open_run_folder(config.output_path,
                              config.model + "_backend-" + backend + "-" + std::to_string(kd::get_world_size()));
  } catch (const kindling::Error& e) {
    throw kindling::UsageError(std::string("--output_path '") + config.output_path + "': " + e.what());
  }
  logger.info((run.continued ? "Restart " + std::to_string(kd::restart_count()) + ": continuing in "
                             : std::string("Output path: ")) +
              run.path);
  return run;
}

kindling::nn::DistributedDataParallel<kindling::models::ResNetImpl> get_model(const Config& config,
                                                                             int64_t channels) {
  const auto options = kindling::models::ResNetOptions().num_classes(10).in_channels(channels);
  if (config.model == "resnet34") return kd::auto_model(kindling::models::resnet34(options));
  if (config.model == "resnet50") return kd::auto_model(kindling::models::resnet50(options));
  return kd::auto_model(kindling::models::resnet18(options));
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

}  // namespace

void training(int /*local_rank*/, Config config) {
  const int rank = kd::get_rank();
  at::manual_seed(static_cast<uint64_t>(config.seed + rank));
  const int threads = share_the_cores();
  const kh::Logger logger = kh::setup_logger("CIFAR10-Training");
  kh::RunFolder run;
  try {
    const DataChoice data = choose_data(config);  // every rank: a wrong path fails everywhere
    const std::string why = apply_dataset_defaults(config, data.dataset);
    log_basic_info(logger, config, data, why);
    logger.info("- intra-op threads per rank: " + std::to_string(threads));
    // --resume_from is read before the run folder is made: a wrong file leaves no folder.
    std::optional<kindling::StateDict> resume_state;
    if (!config.resume_from.empty()) {
      KINDLING_CHECK(std::filesystem::is_regular_file(path_status("--resume_from", config.resume_from)),
                     "cifar10: --resume_from '",
                     config.resume_from, "' is not a file; give a training_checkpoint_<iteration>.pt of an earlier run");
      resume_state = kh::Checkpoint::load_file(config.resume_from);  // every rank reads the file
    }
    run = make_run_folder(logger, config);
    const std::string& run_folder = run.path;

    Dataflow flow = get_dataflow(data, config);
    const int64_t iters_per_epoch = flow.train.size();
    KINDLING_CHECK(iters_per_epoch > 0, "cifar10: the training split gives no batch of ", config.batch_size,
                   " samples over ", kd::get_world_size(), " rank(s) (drop_last); use a smaller --batch_size");
    auto model = get_model(config, data.channels);
    const auto sgd_options =
        torch::optim::SGDOptions(*config.learning_rate).momentum(config.momentum).weight_decay(config.weight_decay).nesterov(true);
    // --profile: an SGD that marks its step, a criterion that marks the forward's end.
    auto split = config.profile && rank == 0 ? std::make_shared<IterationSplit>() : nullptr;
    auto sgd = split ? std::make_unique<TimedSGD>(model->parameters(), sgd_options, split)
                     : std::make_unique<torch::optim::SGD>(model->parameters(), sgd_options);
    torch::optim::SGD& optimizer = *sgd;
    kd::auto_optim(optimizer);
    kindling::engine::LossFunction criterion = [](const at::Tensor& y_pred, const at::Tensor& y) {
      return at::cross_entropy_loss(y_pred, y);
    };
    if (split) criterion = split->timed(criterion);
    auto lr_scheduler = get_lr_scheduler(config, optimizer, iters_per_epoch);

    // The trainer, with the tutorial's output {"batch loss": loss.item()}.
    auto scaler = config.with_amp ? std::make_shared<kindling::engine::GradScaler>() : nullptr;
    Engine trainer = kindling::engine::create_supervised_trainer(
        model, optimizer, criterion,
        kindling::engine::SupervisedTrainerOptions()
            .device(kd::device())
            .non_blocking(true)
            .amp(config.with_amp)
            .scaler(scaler)
            .output_transform([](const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor& loss) {
              return Value(loss.item<double>());  // named "batch loss" by the common handlers
            }));
    trainer.name = "trainer";
    if (split) split->attach(trainer, model.reducer());
    kh::Objects to_save{{"trainer", kh::stateful(trainer)},
                        {"model", kh::stateful(model)},
                        {"optimizer", kh::stateful(optimizer)},
                        {"lr_scheduler", kh::stateful(*lr_scheduler)}};
    if (scaler) to_save.push_back({"scaler", kh::stateful(*scaler)});
    auto common = kh::setup_common_training_handlers(
        trainer, kh::CommonTrainingOptions()
                     .to_save(to_save)
                     .save_every_iters(config.checkpoint_every)
                     .checkpoint_include_self(true)  // n_saved across restarts
                     .output_path(run_folder)
                     .lr_scheduler(lr_scheduler)
                     .output_names(config.log_every_iters > 0 ? std::vector<std::string>{"batch loss"}
                                                              : std::vector<std::string>{})
                     .with_pbars(config.log_every_iters > 0)
                     .log_every_iters(std::max<int64_t>(1, config.log_every_iters)));
    std::string resume_from = config.resume_from;
    if (resume_from.empty() && run.continued) {
      // After a restart: the newest checkpoint in this job's own run folder, as rank 0 finds
      // it; with it the checkpoint's list of kept files, so that n_saved spans the attempts.
      auto last = kd::get_rank() == 0 ? kh::Checkpoint::find_latest(run_folder, "training") : std::nullopt;
      resume_from = kd::get_world_size() > 1 ? kd::broadcast(last.value_or(""), 0) : last.value_or("");
      if (!resume_from.empty()) resume_state = kh::Checkpoint::load_file(resume_from);
    }
    if (resume_state) {
      kh::Objects to_load = to_save;
      if (run.continued && resume_state->contains("checkpointer"))
        to_load.push_back({"checkpointer", kh::stateful(*common->checkpoint)});
      kh::Checkpoint::load_objects(to_load, *resume_state, true, resume_from);
      logger.info("Resumed from " + resume_from + " at iteration " + std::to_string(trainer.state().iteration));
    }

    // Evaluators on the train and test sets; metrics reduced over the ranks.
    auto make_evaluator = [&](const std::string& name) {
      Engine e = kindling::engine::create_supervised_evaluator(
          model, {{"Accuracy", std::make_shared<km::Accuracy>()}, {"Loss", std::make_shared<km::Loss>(criterion)}},
          kindling::engine::SupervisedEvaluatorOptions().device(kd::device()).non_blocking(true).amp(config.with_amp));
      e.name = name;
      return e;
    };
    Engine train_evaluator = make_evaluator("train_evaluator");
    Engine test_evaluator = make_evaluator("test_evaluator");

    // Logs: TensorBoard as the tutorial, the same scalars as JSON lines and an HTML report.
    kh::TensorboardLogger tb(run_folder);
    kh::JsonLogger json(run_folder + "/scalars.jsonl");
    kh::HtmlReport report(run_folder + "/report.html",
                          config.model + " on " + data.dataset + ", " +
                              (kd::get_world_size() > 1 ? kd::backend() : std::string("one process")) + " x " +
                              std::to_string(kd::get_world_size()));
    report.set_config(describe(config));
    for (kh::BaseLogger* sink : std::initializer_list<kh::BaseLogger*>{&tb, &json, &report}) {
      if (config.log_every_iters > 0) {
        sink->attach_output_handler(trainer, Events::ITERATION_COMPLETED.every(config.log_every_iters), "training",
                                    {}, [](const Value& out) {
                                      return std::map<std::string, double>{{"batch loss", out.number()}};
                                    });
      }
      sink->attach_opt_params_handler(trainer, Events::ITERATION_STARTED.every(std::max<int64_t>(1, config.log_every_iters)),
                                      optimizer);
      sink->attach_output_handler(train_evaluator, Events::COMPLETED, "train", {"Accuracy", "Loss"}, {},
                                  kh::global_step_from_engine(trainer));
      sink->attach_output_handler(test_evaluator, Events::COMPLETED, "test", {"Accuracy", "Loss"}, {},
                                  kh::global_step_from_engine(trainer));
    }

    // Measurements for the table and summary.json.
    Results results;
    results.dataset = data.dataset;
    results.backend = kd::get_world_size() > 1 ? kd::backend() : "none";
    results.world_size = kd::get_world_size();
    results.batch_size = config.batch_size;
    results.output_path = run_folder;
    Clock::time_point epoch_start, train_end;
    int64_t epoch_iterations = 0;
    trainer.on(Events::EPOCH_STARTED, [&](Engine&) {
      epoch_start = Clock::now();
      epoch_iterations = 0;
    });
    trainer.on(Events::ITERATION_COMPLETED, [&](Engine&) {
      ++epoch_iterations;
      train_end = Clock::now();
    });

    auto run_validation = [&](Engine& t) {
      const int64_t epoch = t.state().epoch;
      // At the end of a run whose last epoch was just validated (num_epochs a multiple of
      // validate_every), the tutorial evaluates the same weights again; once is enough.
      if (!results.validations.empty() && results.validations.back().epoch == epoch) return;
      Validation v{epoch};
      for (Engine* e : {&train_evaluator, &test_evaluator}) {
        const auto start = Clock::now();
        e->run(e == &train_evaluator ? flow.train : flow.test);
        const auto& m = e->state().metrics;
        const double acc = m.at("Accuracy").number(), loss = m.at("Loss").number();
        (e == &train_evaluator ? v.train_accuracy : v.test_accuracy) = acc;
        (e == &train_evaluator ? v.train_loss : v.test_loss) = loss;
        logger.info("Epoch " + std::to_string(epoch) + " - Evaluation time (seconds): " +
                    fixed(std::chrono::duration<double>(Clock::now() - start).count(), 2) + " - " +
                    (e == &train_evaluator ? "train" : "test") + " metrics:\n\tAccuracy: " + fixed(acc, 4) +
                    "\n\tLoss: " + fixed(loss, 4));
      }
      results.validations.push_back(v);
      report.render("updated after the validation of epoch " + std::to_string(epoch));
    };
    trainer.on(Events::EPOCH_COMPLETED.every(config.validate_every) | Events::COMPLETED, run_validation);
    trainer.on(Events::EPOCH_COMPLETED, [&](Engine& t) {
      if (epoch_iterations > 0) {
        const double train_s = std::chrono::duration<double>(train_end - epoch_start).count();
        results.train_samples_per_s.push_back(static_cast<double>(epoch_iterations * config.batch_size) / train_s);
      }
      results.epoch_seconds.push_back(std::chrono::duration<double>(Clock::now() - epoch_start).count());
      logger.info("Epoch[" + std::to_string(t.state().epoch) + "] Complete. Time taken: " +
                  fixed(results.epoch_seconds.back(), 1) + " s");
    });

    // The two best models by test accuracy.
    std::make_shared<kh::Checkpoint>(
        kh::Objects{{"model", kh::stateful(model)}},
        std::make_shared<kh::DiskSaver>(run_folder, kh::DiskSaverOptions().require_empty(false)),
        kh::CheckpointOptions()
            .filename_prefix("best")
            .n_saved(2)
            .global_step_transform(kh::global_step_from_engine(trainer))
            .score_name("test_accuracy")
            .score_function([](Engine& e) { return e.state().metrics.at("Accuracy").number(); }))
        ->attach(test_evaluator, Events::COMPLETED);

    if (config.stop_iteration) {
      trainer.on(Events::ITERATION_COMPLETED.once(*config.stop_iteration), [&](Engine& t) {
        logger.info("Stop training on iteration " + std::to_string(t.state().iteration));
        t.terminate();
      });
    }

    trainer.run(flow.train, *config.num_epochs);

    const double rss = peak_rss_mb();
    results.peak_rss_mb = kd::get_world_size() > 1 ? kd::all_gather(rss) : std::vector<double>{rss};
    tb.close();
    json.close();
    report.render("run complete");
    report.close();
    if (split) results.iteration_split_ms = split->medians();
    if (rank == 0) {
      write_summary(results);
      std::fprintf(stdout, "%s", table(results).c_str());
      if (common->checkpoint && common->checkpoint->last_checkpoint()) {
        std::fprintf(stdout, "Last training checkpoint: %s\n", common->checkpoint->last_checkpoint()->c_str());
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    if (run.remove_if_unused()) logger.info("Removed the unused run folder " + run.path);
    logger.error(std::string("training failed: ") + e.what());
    throw;
  }
}

}  // namespace cifar10
