// The training job of the elastic cases (tests/cluster/elastic_test.py), started by
// kindling-run --nnodes MIN:MAX on every host. A linear model trained on a dataset whose
// samples carry their ids, with the Checkpoint handler's two-line resume: after a
// rendezvous round at another world size it goes on from the latest checkpoint.
//
//   elastic_train train DIR [--samples 600] [--batch 12] [--epochs 3] [--save-every 5] [--sleep-ms 40]
//   elastic_train train-live DIR [...] [--sleep-before-init-ms 0] [--sharding none|zero2|zero3]
//                                  # under kindling-run --live_recovery: kh::LiveRecovery, no checkpoint; the sleep
//                                  # stands for set-up before initialize(); --sharding: the model sharded (its
//                                  # parts committed by each rank, kindling::nn::ShardingOptions) instead of DDP
//   elastic_train parallel-live DIR --endpoint E --nodes MIN:MAX --rdzv-id ID [--rdzv-backend c10d|etcd] [...]
//                                  # train-live started by kd::Parallel (elastic, live_recovery) on this node
//   elastic_train evaluate DIR     # one process, no launcher: the final checkpoint's metrics
//
// --batch is the global batch (each rank takes batch / world size, auto_dataloader's rule).
// Every rank gathers the ids of each iteration's global batch into a ledger kept in the
// checkpoint, so the ledger lists exactly the samples whose gradients are in the saved
// weights: a sample trained again after a restart is counted only if the first pass was
// saved. Rank 0 prints "PROGRESS world=W iteration=I epoch=E" every iteration and, at the
// end, writes DIR/ledger.txt ("<epoch> <iteration> <id>" lines) and DIR/final.pt (the
// model), prints "WEIGHTS <w1> <w2> <w3> <b>" (%.9g), then
// evaluates on every rank and prints "EVAL mse=<v> mae=<v>" (%.9g). `evaluate` loads
// DIR/final.pt into one process and prints the same line. Every rank prints "START rank=R
// world=W node_rank=N nnodes=K local_rank=L restart=C pid=P" (C: TORCHELASTIC_RESTART_COUNT) first.
#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/dist/parallel.h>
#include <kindling/engine/engine.h>
#include <kindling/engine/supervised.h>
#include <kindling/handlers/checkpointing/checkpoint.h>
#include <kindling/handlers/checkpointing/live_recovery.h>
#include <kindling/metrics/regression.h>
#include <kindling/nn/sharding.h>

#include "support/id_dataset.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
namespace km = kindling::metrics;
using kindling::data::Example;
using kindling::engine::Engine;
using kindling::engine::Events;

namespace {

// The ids of every iteration's global batch that made it into the model, kept in the checkpoint.
struct Ledger {
  std::vector<int64_t> rows;  // epoch, iteration, id, ...
  kindling::StateDict state_dict() const {
    auto d = kindling::new_state_dict();
    d.insert("rows", at::tensor(rows, at::kLong));
    return d;
  }
  void load_state_dict(const kindling::StateDict& d) {
    const at::Tensor t = d.at("rows").toTensor().contiguous();
    rows.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
};

std::map<std::string, std::string> flags(int argc, char** argv) {
  std::map<std::string, std::string> f{
      {"--samples", "600"}, {"--batch", "12"}, {"--epochs", "3"}, {"--save-every", "5"}, {"--sleep-ms", "40"},
      {"--sleep-before-init-ms", "0"}, {"--sharding", "none"}};
  for (int i = 3; i + 1 < argc; i += 2) f[argv[i]] = argv[i + 1];
  return f;
}

std::pair<at::Tensor, at::Tensor> features(const Example& b, std::optional<c10::Device>, bool) {
  return {b.data.narrow(1, 1, 3), b.target};
}

// Distributed (or one-process) evaluation of `model` on the whole dataset.
void evaluate(torch::nn::Linear model, int64_t samples) {
  auto loader = kd::auto_dataloader(std::make_shared<kindling::testing::IdDataset>(samples),
                                    kindling::data::DataLoaderOptions().batch_size(24).shuffle(false));
  Engine evaluator = kindling::engine::create_supervised_evaluator(
      model, {{"mse", std::make_shared<km::MeanSquaredError>()}, {"mae", std::make_shared<km::MeanAbsoluteError>()}},
      kindling::engine::SupervisedEvaluatorOptions().prepare_batch(features));
  evaluator.run(loader);
  if (kd::get_rank() == 0) {
    const auto& m = evaluator.state().metrics;
    std::printf("EVAL mse=%.9g mae=%.9g\n", m.at("mse").number(), m.at("mae").number());
    std::fflush(stdout);
  }
}

// The trainer of `model` (DDP over the current world), whose iterations add their global batch
// to `ledger` and report progress on rank 0.
template <typename Model>
Engine make_trainer(Model& model, torch::optim::SGD& optimizer, Ledger& ledger, int64_t sleep_ms) {
  Engine trainer = kindling::engine::create_supervised_trainer(
      model, optimizer, [](const at::Tensor& y, const at::Tensor& t) { return at::mse_loss(y, t); },
      kindling::engine::SupervisedTrainerOptions().prepare_batch(features));
  trainer.on(Events::ITERATION_COMPLETED, [&ledger, sleep_ms](Engine& e) {
    const at::Tensor ids = kd::all_gather(e.state().batch_as<Example>().data.select(1, 0).to(at::kLong).contiguous());
    for (int64_t i = 0; i < ids.numel(); ++i) {
      ledger.rows.insert(ledger.rows.end(), {e.state().epoch, e.state().iteration, ids[i].item<int64_t>()});
    }
    if (kd::get_rank() == 0) {
      std::printf("PROGRESS world=%d iteration=%lld epoch=%lld\n", kd::get_world_size(),
                  static_cast<long long>(e.state().iteration), static_cast<long long>(e.state().epoch));
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  });
  return trainer;
}

kindling::data::DataLoader make_loader(const std::map<std::string, std::string>& f) {
  return kd::auto_dataloader(
      std::make_shared<kindling::testing::IdDataset>(std::stoll(f.at("--samples"))),
      kindling::data::DataLoaderOptions().batch_size(std::stoll(f.at("--batch"))).shuffle(true).seed(7));
}

void print_start() {
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  std::printf("START rank=%d world=%d node_rank=%d nnodes=%d local_rank=%d restart=%s pid=%d\n", kd::get_rank(),
              kd::get_world_size(), kd::get_node_rank(), kd::get_nnodes(), kd::get_local_rank(),
              restart ? restart : "unset", static_cast<int>(::getpid()));
  std::fflush(stdout);
}

// Rank 0 writes the ledger, the final model and its weights; every rank evaluates.
int finish(const std::string& dir, torch::nn::Linear linear, const Ledger& ledger, int64_t samples) {
  if (kd::get_rank() == 0) {
    std::ofstream out(dir + "/ledger.txt");
    for (std::size_t i = 0; i + 2 < ledger.rows.size(); i += 3)
      out << ledger.rows[i] << " " << ledger.rows[i + 1] << " " << ledger.rows[i + 2] << "\n";
    std::printf("WEIGHTS");
    for (const at::Tensor& p : {linear->weight, linear->bias}) {
      const at::Tensor flat = p.detach().flatten();
      for (int64_t i = 0; i < flat.numel(); ++i) std::printf(" %.9g", flat[i].item<double>());
    }
    std::printf("\n");
    torch::save(linear, dir + "/final.pt");
  }
  evaluate(linear, samples);
  kd::finalize();
  return 0;
}

int train(const std::string& dir, const std::map<std::string, std::string>& f) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  print_start();
  auto loader = make_loader(f);
  at::manual_seed(3);
  torch::nn::Linear linear(3, 1);
  auto model = kd::auto_model(linear);
  torch::optim::SGD optimizer(model->parameters(), 0.2);
  Ledger ledger;
  Engine trainer = make_trainer(model, optimizer, ledger, std::stoll(f.at("--sleep-ms")));
  kh::Objects to_save{{"trainer", kh::stateful(trainer)},
                      {"model", kh::stateful(model)},
                      {"optimizer", kh::stateful(optimizer)},
                      {"ledger", kh::stateful(ledger)}};
  // After the ledger's handler: a checkpoint holds the ids of the iterations in its weights.
  auto checkpoint = std::make_shared<kh::Checkpoint>(to_save, dir, kh::CheckpointOptions().filename_prefix("training"));
  checkpoint->attach(trainer, {Events::ITERATION_COMPLETED.every(std::stoll(f.at("--save-every")))});
  if (auto last = kh::Checkpoint::find_latest(dir, "training")) kh::Checkpoint::load_objects(to_save, *last);
  trainer.run(loader, std::stoll(f.at("--epochs")));
  return finish(dir, linear, ledger, std::stoll(f.at("--samples")));
}

// One world of train-live with the model sharded: its parts and the optimizer's committed by
// each rank; at the end the whole weights are copied into `linear` (a destroyed sharded model
// leaves no values in its module under ZeRO-3).
void train_sharded(kh::LiveRecovery& self, torch::nn::Linear linear, Ledger& ledger,
                   const std::map<std::string, std::string>& f, bool zero3) {
  std::vector<std::pair<std::string, at::Tensor>> whole;
  {
    auto loader = make_loader(f);
    auto model = kd::auto_model(linear, kindling::nn::ShardingOptions().reshard_after_forward(zero3));
    torch::optim::SGD optimizer(model.parameters(), 0.2);
    Engine trainer = make_trainer(model, optimizer, ledger, std::stoll(f.at("--sleep-ms")));
    self.keep({{"trainer", kh::stateful(trainer)},
               {"model", kh::stateful(model)},
               {"optimizer", kh::stateful(optimizer, model)},
               {"ledger", kh::stateful(ledger)}},
              trainer);
    trainer.run(loader, std::stoll(f.at("--epochs")));
    whole = model.sharded()->full_parameters();
  }  // the sharded model destroyed first: it leaves NaN in the module's parameters
  at::NoGradGuard no_grad;
  for (const auto& [name, value] : whole) linear->named_parameters()[name].set_data(value);
}

// The same job under kindling-run --live_recovery: no checkpoint; a lost or new node changes
// the world in the same processes (kh::LiveRecovery). Each world prints "WORLD rank=R world=W
// pid=P" on every rank.
int train_live(const std::string& dir, const std::map<std::string, std::string>& f) {
  // A program's own set-up before it initializes (a joiner under --warm_join loads meanwhile).
  std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(f.at("--sleep-before-init-ms"))));
  kh::LiveRecovery live(kh::LiveRecoveryOptions().init_options(kd::InitOptions().timeout(std::chrono::seconds(60))));
  if (!kd::is_initialized()) kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  print_start();
  at::manual_seed(3);
  torch::nn::Linear linear(3, 1);
  Ledger ledger;
  const std::string sharding = f.at("--sharding");
  live.run([&](kh::LiveRecovery& self) {
    std::printf("WORLD rank=%d world=%d pid=%d\n", kd::get_rank(), kd::get_world_size(), static_cast<int>(::getpid()));
    std::fflush(stdout);
    if (sharding != "none") return train_sharded(self, linear, ledger, f, sharding == "zero3");
    auto loader = make_loader(f);
    auto model = kd::auto_model(linear);
    torch::optim::SGD optimizer(model->parameters(), 0.2);
    Engine trainer = make_trainer(model, optimizer, ledger, std::stoll(f.at("--sleep-ms")));
    self.keep({{"trainer", kh::stateful(trainer)},
               {"model", kh::stateful(linear)},
               {"optimizer", kh::stateful(optimizer)},
               {"ledger", kh::stateful(ledger)}},
              trainer);
    trainer.run(loader, std::stoll(f.at("--epochs")));
  });
  return finish(dir, linear, ledger, std::stoll(f.at("--samples")));
}

// train-live in the children of kd::Parallel's elastic spawn mode, one per node: Parallel's
// own rendezvous agent (in this process) takes the place of kindling-run --live_recovery.
int parallel_live(const std::string& dir, const std::map<std::string, std::string>& f) {
  const std::string nodes = f.at("--nodes");
  const std::size_t colon = nodes.find(':');
  kd::Parallel parallel(kd::ParallelOptions("gloo")
                            .nproc_per_node(1)
                            .min_nnodes(std::stoi(nodes.substr(0, colon)))
                            .nnodes(std::stoi(nodes.substr(colon + 1)))
                            .rdzv_endpoint(f.at("--endpoint"))
                            .rdzv_id(f.at("--rdzv-id"))
                            .rdzv_backend(f.count("--rdzv-backend") ? f.at("--rdzv-backend") : "c10d")
                            .live_recovery(true)
                            .max_restarts(3)
                            .last_call_timeout(std::chrono::seconds(3))
                            .grace_period(std::chrono::seconds(2)));
  int code = 0;
  parallel.run([&](int) { code = train_live(dir, f); });
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc >= 3 ? argv[1] : "";
  if (command != "train" && command != "train-live" && command != "parallel-live" && command != "evaluate") {
    std::fprintf(stderr, "usage: elastic_train train|train-live|parallel-live|evaluate DIR [--flag value]...\n");
    return 2;
  }
  const auto f = flags(argc, argv);
  if (command == "train") return train(argv[2], f);
  if (command == "train-live") return train_live(argv[2], f);
  if (command == "parallel-live") return parallel_live(argv[2], f);
  torch::nn::Linear linear(3, 1);
  torch::load(linear, std::string(argv[2]) + "/final.pt");
  evaluate(linear, std::stoll(f.at("--samples")));
  return 0;
}
