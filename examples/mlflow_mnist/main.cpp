// mlflow_mnist: a small model trained data-parallel on Fashion-MNIST, tracked on an MLflow
// server: the run's parameters, the training loss and learning rate every N iterations and the
// test metrics every epoch (setup_mlflow_logging: ignite's keys "training batch_loss",
// "lr group_0", "test accuracy"), then the HTML report and the best checkpoint as artifacts.
// Training never waits on the server: start it or not, the run goes on (mlflow.h).
//
//   mlflow server --host 127.0.0.1 --port 5000 &          # pip install mlflow
//   ./mlflow_mnist --tracking-uri http://127.0.0.1:5000 --experiment fashion
//   MLFLOW_TRACKING_URI=http://127.0.0.1:5000 kindling-run --nproc_per_node 2 ./mlflow_mnist
//
// Rank 0 prints the run's id (or that the server did not answer) and one line per epoch:
//   run 3f2a...: experiment 1 at http://127.0.0.1:5000
//   epoch 1: test accuracy 0.7712, test loss 0.6508
// --json-mirror FILE also writes every value logged to MLflow to a JsonLogger file (same handlers,
// same steps), which the tests compare with what the server kept.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <kindling/error.h>
#include <kindling/kindling.h>

#include <cstdio>
#include <optional>
#include <string>

#include "cli/cli.h"
#include "cli/run_workers.h"

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
namespace data = kindling::data;
namespace km = kindling::metrics;
using kindling::engine::Engine;
using kindling::engine::Events;

namespace {

struct Options {
  std::string backend = "gloo";
  std::optional<int> nproc_per_node;
  std::string tracking_uri;  // "" -> MLFLOW_TRACKING_URI
  std::string experiment, run_name;
  int epochs = 2;
  int64_t batch_size = 64, limit = 4000, test_limit = 2000, log_every = 10;
  double lr = 0.05;
  std::string data_dir = data::kFashionMnistRoot;
  std::string output_path = "/tmp/mlflow_mnist";
  std::string json_mirror;
};

std::shared_ptr<const data::Dataset> split(const Options& o, bool train) {
  std::shared_ptr<const data::Dataset> ds = std::make_shared<data::FashionMNIST>(o.data_dir, train);
  const int64_t limit = train ? o.limit : o.test_limit;
  if (limit > 0 && limit < ds->size()) {
    std::vector<int64_t> first(static_cast<std::size_t>(limit));
    for (int64_t i = 0; i < limit; ++i) first[static_cast<std::size_t>(i)] = i;
    ds = std::make_shared<data::Subset>(ds, first);
  }
  return std::make_shared<data::TransformedDataset>(ds, data::transforms::ToTensor());
}

at::Tensor loss_fn(const at::Tensor& y_pred, const at::Tensor& y) { return at::cross_entropy_loss(y_pred, y); }

void training(int /*local_rank*/, const Options& o) {
  at::manual_seed(7);
  auto train_loader =
      kd::auto_dataloader(split(o, true), data::DataLoaderOptions().batch_size(o.batch_size).shuffle(true));
  auto test_loader =
      kd::auto_dataloader(split(o, false), data::DataLoaderOptions().batch_size(256).shuffle(false).pad_shards(false));
  auto model = kd::auto_model(torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 64), torch::nn::ReLU(),
                                                    torch::nn::Linear(64, 10)));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(o.lr).momentum(0.9));
  kd::auto_optim(optimizer);

  Engine trainer = kindling::engine::create_supervised_trainer(model, optimizer, loss_fn);
  auto common = kh::setup_common_training_handlers(
      trainer, kh::CommonTrainingOptions().output_names({"batch_loss"}).with_pbars(false));
  Engine evaluator = kindling::engine::create_supervised_evaluator(
      model, {{"accuracy", std::make_shared<km::Accuracy>()}, {"loss", std::make_shared<km::Loss>(loss_fn)}});

  // Every rank makes the logger; rank 0 creates the run and talks to the server.
  kh::MLflowLogger::RunOptions run;
  if (!o.experiment.empty()) run.experiment_name = o.experiment;
  if (!o.run_name.empty()) run.run_name = o.run_name;
  auto mlflow =
      kh::setup_mlflow_logging(trainer, {{"", &optimizer}}, {{"test", &evaluator}}, o.log_every, o.tracking_uri, run);
  mlflow->log_params({{"lr", std::to_string(o.lr)},
                      {"batch_size", std::to_string(o.batch_size)},
                      {"epochs", std::to_string(o.epochs)},
                      {"world_size", std::to_string(kd::get_world_size())},
                      {"backend", kd::backend()}});
  std::optional<kh::JsonLogger> mirror;  // the same handlers, to a file
  if (!o.json_mirror.empty()) {
    mirror.emplace(o.json_mirror);
    mirror->attach_output_handler(trainer, Events::ITERATION_COMPLETED.every(o.log_every), "training", {"all"});
    mirror->attach_opt_params_handler(trainer, Events::ITERATION_STARTED.every(o.log_every), optimizer);
    mirror->attach_output_handler(evaluator, Events::COMPLETED, "test", {"all"}, {},
                                  kh::global_step_from_engine(trainer));
  }
  kh::HtmlReport report(o.output_path + "/report.html", "mlflow_mnist");
  report.attach_output_handler(evaluator, Events::COMPLETED, "test", {"accuracy", "loss"}, {},
                               kh::global_step_from_engine(trainer));
  auto best = std::make_shared<kh::Checkpoint>(
      kh::Objects{{"model", kh::stateful(model)}},
      std::make_shared<kh::DiskSaver>(o.output_path, kh::DiskSaverOptions().require_empty(false)),
      kh::CheckpointOptions()
          .filename_prefix("best")
          .n_saved(1)
          .score_name("test_accuracy")
          .score_function([](Engine& e) { return e.state().metrics.at("accuracy").number(); }));
  best->attach(evaluator, Events::COMPLETED);
  trainer.on(Events::EPOCH_COMPLETED, [&](Engine& t) {
    evaluator.run(test_loader);
    if (kd::get_rank() != 0) return;
    const auto& m = evaluator.state().metrics;
    std::printf("epoch %lld: test accuracy %.4f, test loss %.4f\n", static_cast<long long>(t.state().epoch),
                m.at("accuracy").number(), m.at("loss").number());
    std::fflush(stdout);
  });
  if (kd::get_rank() == 0) {
    if (mlflow->run_id().empty()) {
      std::printf("no run yet at %s (the server did not answer); training goes on\n", mlflow->tracking_uri().c_str());
    } else {
      std::printf("run %s: experiment %s at %s\n", mlflow->run_id().c_str(), mlflow->experiment_id().c_str(),
                  mlflow->tracking_uri().c_str());
    }
    std::fflush(stdout);
  }
  trainer.run(train_loader, o.epochs);

  report.render("after " + std::to_string(o.epochs) + " epochs");
  if (best->last_checkpoint()) mlflow->log_artifact(*best->last_checkpoint(), "checkpoints");
  mlflow->log_artifact(o.output_path + "/report.html");
  mlflow->close();  // sends what waits, marks the run FINISHED
  if (mirror) mirror->close();
  if (kd::get_rank() == 0 && mlflow->not_logged() > 0) {
    std::printf("%lld values or artifacts were not logged to MLflow (see the warnings)\n",
                static_cast<long long>(mlflow->not_logged()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"A model trained on Fashion-MNIST, tracked on an MLflow server", "mlflow_mnist"};
  app.add_option("--backend", o.backend, "gloo (default), mpi, nccl or serial");
  app.add_option("--nproc-per-node", o.nproc_per_node, "Processes to start (default 2; none under a launcher)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--tracking-uri", o.tracking_uri, "The MLflow server (default: MLFLOW_TRACKING_URI)");
  app.add_option("--experiment", o.experiment, "Experiment name (default: MLFLOW_EXPERIMENT_NAME, else Default)");
  app.add_option("--run-name", o.run_name, "The run's name (default: MLflow picks one)");
  app.add_option("--epochs", o.epochs, "Epochs")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Batch size over all ranks")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--limit", o.limit, "Training samples used (0: all 60000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--test-limit", o.test_limit, "Test samples used (0: all 10000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--log-every", o.log_every, "Iterations between logged training values")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")
      ->check(kindling::cli::finite_number(kindling::cli::kPositiveNumber))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Directory of the Fashion-MNIST *-ubyte.gz files")->capture_default_str();
  app.add_option("--output-path", o.output_path, "Folder of the report and the best checkpoint")->capture_default_str();
  app.add_option("--json-mirror", o.json_mirror, "Also write every logged value to this JSON-lines file");
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
  return kindling::cli::run_workers("mlflow_mnist", o.backend, o.nproc_per_node, training, o);
}
