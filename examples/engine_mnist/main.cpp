// engine_mnist: a small CNN trained data-parallel on Fashion-MNIST through kindling's
// training engine: create_supervised_trainer / create_supervised_evaluator, Accuracy and
// Loss computed across ranks (the test set is sharded without padding, so the figures
// equal a single process's), the common training handlers (progress bar, running average
// of the batch loss, stop on NaN, a training checkpoint every N iterations), a linear
// warm-up (a quarter epoch) then decay of the learning rate, TensorBoard logs, the best model kept, and
// --resume-from to continue from a training checkpoint.
//
//   ./engine_mnist                                 # 2 processes it starts itself, gloo
//   ./engine_mnist --nproc-per-node 3 --epochs 2 --limit 12000 --output-path /tmp/run
//   ./engine_mnist --epochs 3 --output-path /tmp/run --resume-from /tmp/run/training_checkpoint_188.pt
//   kindling-run --nproc_per_node 2 ./engine_mnist --backend gloo
//
// Rank 0 prints one line per epoch:
//   epoch 1: train loss 0.6123 (running 0.5310), test accuracy 0.8012, test loss 0.5520 (10000 samples)
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/optim/sgd.h>

#include <kindling/error.h>
#include <kindling/kindling.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/cli.h"
#include "cli/run_workers.h"

namespace kd = kindling::dist;
namespace data = kindling::data;
namespace km = kindling::metrics;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

namespace {

struct Options {
  std::string backend = "gloo";
  std::optional<int> nproc_per_node;
  int epochs = 1;
  int64_t batch_size = 128;  // over all ranks
  int64_t limit = 0;         // 0: all 60000 training samples
  double lr = 0.05;
  std::string data_dir = data::kFashionMnistRoot;
  std::string output_path = "/tmp/engine_mnist";
  std::string resume_from;
  int64_t checkpoint_every = 200;
};

std::shared_ptr<const data::Dataset> split(const Options& o, bool train) {
  std::shared_ptr<const data::Dataset> ds = std::make_shared<data::FashionMNIST>(o.data_dir, train);
  if (train && o.limit > 0 && o.limit < ds->size()) {
    std::vector<int64_t> first(static_cast<std::size_t>(o.limit));
    for (int64_t i = 0; i < o.limit; ++i) first[static_cast<std::size_t>(i)] = i;
    ds = std::make_shared<data::Subset>(ds, first);
  }
  data::transforms::Compose pipeline({data::transforms::ToTensor(), data::transforms::Normalize({0.2860}, {0.3530})});
  return std::make_shared<data::TransformedDataset>(ds, pipeline);
}

torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)), torch::nn::ReLU(),
                               torch::nn::MaxPool2d(2),
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)), torch::nn::ReLU(),
                               torch::nn::MaxPool2d(2), torch::nn::Flatten(), torch::nn::Linear(32 * 7 * 7, 10));
}

at::Tensor loss_fn(const at::Tensor& y_pred, const at::Tensor& y) { return at::cross_entropy_loss(y_pred, y); }

// Linear warm-up over the first quarter epoch to lr, then linear decay to 0 at the end.
std::shared_ptr<kindling::handlers::PiecewiseLinear> make_scheduler(torch::optim::Optimizer& optimizer,
                                                                    const Options& o, int64_t per_epoch) {
  const int64_t warmup = std::max<int64_t>(1, per_epoch / 4);
  return std::make_shared<kindling::handlers::PiecewiseLinear>(
      optimizer, "lr",
      std::vector<std::pair<int64_t, double>>{
          {0, 0.0}, {warmup, o.lr}, {std::max<int64_t>(warmup + 1, o.epochs * per_epoch), 0.0}});
}

void training(int /*local_rank*/, const Options& o) {
  at::manual_seed(543 + kd::get_rank());
  auto train_loader = kd::auto_dataloader(
      split(o, true), data::DataLoaderOptions().batch_size(o.batch_size).num_workers(2).shuffle(true));
  auto test_loader = kd::auto_dataloader(
      split(o, false),
      data::DataLoaderOptions().batch_size(2 * o.batch_size).num_workers(2).shuffle(false).pad_shards(false));
  at::manual_seed(543);  // the same initial weights on every rank (DDP also broadcasts them)
  auto model = kd::auto_model(make_model());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(o.lr).momentum(0.9));
  kd::auto_optim(optimizer);

  Engine trainer = kindling::engine::create_supervised_trainer(model, optimizer, loss_fn);
  trainer.name = "trainer";  // the engine's log lines name it: "trainer: Epoch[1] Complete. Time taken: ..."
  auto epoch_loss = std::make_shared<km::Average>();
  epoch_loss->attach(trainer, "train_loss");

  auto scheduler = make_scheduler(optimizer, o, train_loader.size());
  namespace kh = kindling::handlers;
  const kh::Objects to_save{{"trainer", kh::stateful(trainer)},
                            {"model", kh::stateful(model)},
                            {"optimizer", kh::stateful(optimizer)},
                            {"lr_scheduler", kh::stateful(*scheduler)}};
  auto common = kh::setup_common_training_handlers(trainer, kh::CommonTrainingOptions()
                                                                .to_save(to_save)
                                                                .save_every_iters(o.checkpoint_every)
                                                                .output_path(o.output_path)
                                                                .lr_scheduler(scheduler)
                                                                .output_names({"batch_loss"})
                                                                .log_every_iters(10));

  auto accuracy = std::make_shared<km::Accuracy>();
  auto test_loss = std::make_shared<km::Loss>(loss_fn);
  Engine evaluator =
      kindling::engine::create_supervised_evaluator(model, {{"accuracy", accuracy}, {"loss", test_loss}});
  evaluator.name = "evaluator";
  int64_t samples = 0;
  evaluator.on(Events::ITERATION_COMPLETED, [&](Engine& e) { samples += e.state().output[1].size(0); });

  kh::TensorboardLogger tb(o.output_path + "/tb");  // writes on rank 0 only
  tb.attach_output_handler(trainer, Events::ITERATION_COMPLETED.every(10), "training", {"batch_loss"});
  tb.attach_opt_params_handler(trainer, Events::ITERATION_STARTED.every(10), optimizer);
  tb.attach_output_handler(evaluator, Events::COMPLETED, "test", {"accuracy", "loss"}, {},
                           kh::global_step_from_engine(trainer));
  // The best model by test accuracy (every rank decides alike; rank 0 writes).
  std::make_shared<kh::Checkpoint>(
      kh::Objects{{"model", kh::stateful(model)}},
      std::make_shared<kh::DiskSaver>(o.output_path, kh::DiskSaverOptions().require_empty(false)),
      kh::CheckpointOptions()
          .filename_prefix("best")
          .n_saved(2)
          .score_name("test_accuracy")
          .score_function([](Engine& e) { return e.state().metrics.at("accuracy").number(); })
          .global_step_transform(kh::global_step_from_engine(trainer)))
      ->attach(evaluator, Events::COMPLETED);

  trainer.on(Events::EPOCH_COMPLETED, [&](Engine& t) {
    samples = 0;
    evaluator.run(test_loader);
    const int64_t seen = kd::all_reduce(samples);
    if (kd::get_rank() == 0) {
      const auto& tm = t.state().metrics;
      const auto& em = evaluator.state().metrics;
      std::printf("epoch %lld: train loss %.4f (running %.4f), test accuracy %.4f, test loss %.4f (%lld samples)\n",
                  static_cast<long long>(t.state().epoch), tm.at("train_loss").number(), tm.at("batch_loss").number(),
                  em.at("accuracy").number(), em.at("loss").number(), static_cast<long long>(seen));
      std::fflush(stdout);
    }
  });
  if (!o.resume_from.empty()) {
    kh::Checkpoint::load_objects(to_save, o.resume_from);  // every rank reads the file
    if (kd::get_rank() == 0) {
      std::printf("resuming from %s at iteration %lld\n", o.resume_from.c_str(),
                  static_cast<long long>(trainer.state().iteration));
    }
  }
  trainer.run(train_loader, o.epochs);
  tb.close();
  if (kd::get_rank() == 0 && common->checkpoint && common->checkpoint->last_checkpoint()) {
    std::printf("last training checkpoint: %s\n", common->checkpoint->last_checkpoint()->c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"A CNN trained on Fashion-MNIST through kindling's engine, metrics computed across ranks",
               "engine_mnist"};
  app.add_option("--backend", o.backend, "gloo (default), mpi, nccl or serial");
  app.add_option("--nproc-per-node", o.nproc_per_node, "Processes to start (default 2; none under a launcher)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--epochs", o.epochs, "Epochs")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Batch size over all ranks")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--limit", o.limit, "Use only the first N training samples (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--lr", o.lr, "SGD learning rate")
      ->check(kindling::cli::finite_number(kindling::cli::kPositiveNumber))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Directory of the Fashion-MNIST *-ubyte.gz files")->capture_default_str();
  app.add_option("--output-path", o.output_path, "Folder of checkpoints and TensorBoard logs")->capture_default_str();
  app.add_option("--resume-from", o.resume_from, "A training checkpoint to continue from");
  app.add_option("--checkpoint-every", o.checkpoint_every, "Iterations between training checkpoints")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
  return kindling::cli::run_workers("engine_mnist", o.backend, o.nproc_per_node, training, o);
}
