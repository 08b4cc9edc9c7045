// The job of the goodput harness (tests/fault/goodput.py): dist_tutorial train's network and data
// (examples/dist_tutorial/model.h: PyTorch's classic MNIST network on Debian's Fashion-MNIST, SGD
// with lr 0.01 and momentum 0.5) trained for as long as the harness lets it, through failures.
// --batch is the global batch (auto_dataloader divides it among the ranks, as ignite does), and
// a step lasts at least --pace-ms-per-sample times this rank's part of it: each rank behaves as
// if its host had a device of its own (a host's rate does not depend on how many hosts share
// this machine's cores, and the job's rate is that of the hosts up).
//
//   goodput_train live DIR [--batch 96] [--pace-ms-per-sample 5] [--limit 6000] [--data-dir D]
//       under kindling-run --live_recovery: kh::LiveRecovery, the state committed every iteration
//   goodput_train restart DIR [...] [--save-every 10]
//       under kindling-run --max_restarts or torchrun --max-restarts: a checkpoint every
//       --save-every iterations and the two-line resume after a restart
//
// The job ends when the file DIR/stop exists: rank 0 looks for it every iteration and the ranks
// agree on it in the iteration's one gather (with the ids of the iteration's samples). Rank 0
// prints "STEP t=<unix seconds> world=W iteration=I samples=S" after every iteration (S: the
// global batch) and at the end "LEDGER samples=<in the final weights> lost=L repeated=R epochs=E":
// the ledger counts, in the committed state, how often each sample of each epoch went into the
// weights, so a step redone after a failure is counted once and a lost one not at all; lost:
// samples of completed epochs never trained, repeated: trained more than once in one epoch.
// Every rank prints "START rank=R world=W restart=C pid=P" when it starts.
#include <torch/torch.h>

#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/engine/engine.h>
#include <kindling/engine/supervised.h>
#include <kindling/handlers/checkpointing/checkpoint.h>
#include <kindling/handlers/checkpointing/live_recovery.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "model.h"

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
using kindling::data::Example;
using kindling::engine::Engine;
using kindling::engine::Events;

namespace {

using Flags = std::map<std::string, std::string>;

Flags flags(int argc, char** argv) {
  Flags f{{"--batch", "96"},       {"--pace-ms-per-sample", "5"}, {"--limit", "6000"},
          {"--save-every", "10"}, {"--epochs", "1000000"},       {"--data-dir", "/usr/share/datasets/fashion-mnist"}};
  for (int i = 3; i + 1 < argc; i += 2) f[argv[i]] = argv[i + 1];
  return f;
}

// A split whose targets carry the sample's index: target [label, index].
class Indexed : public kindling::data::Dataset {
 public:
  explicit Indexed(std::shared_ptr<const kindling::data::Dataset> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  Example get(int64_t index) const override {
    Example e = inner_->get(index);
    return {e.data, torch::stack({e.target.to(torch::kLong).reshape({}), torch::tensor(index)})};
  }

 private:
  std::shared_ptr<const kindling::data::Dataset> inner_;
};

// How often each sample of each epoch went into the weights: one row of counts per epoch.
struct Ledger {
  int64_t samples = 0;
  torch::Tensor counts = torch::zeros({0, 0}, torch::kUInt8);
  void add(int64_t epoch, const torch::Tensor& ids) {
    if (counts.size(1) != samples) counts = torch::zeros({0, samples}, torch::kUInt8);
    while (counts.size(0) < epoch) counts = torch::cat({counts, torch::zeros({1, samples}, torch::kUInt8)});
    counts[epoch - 1].index_add_(0, ids, torch::ones({ids.numel()}, torch::kUInt8));
  }
  kindling::StateDict state_dict() const {
    auto d = kindling::new_state_dict();
    d.insert("counts", counts.clone());
    return d;
  }
  void load_state_dict(const kindling::StateDict& d) { counts = d.at("counts").toTensor().clone(); }
};

std::pair<at::Tensor, at::Tensor> features(const Example& b, std::optional<c10::Device>, bool) {
  return {b.data, b.target.select(1, 0)};
}

// The trainer: ledger, stop agreement and progress after each iteration, then the pace.
template <typename Model>
Engine make_trainer(Model& model, torch::optim::Optimizer& optimizer, Ledger& ledger, const std::string& dir,
                    const Flags& f) {
  Engine trainer = kindling::engine::create_supervised_trainer(
      model, optimizer, [](const at::Tensor& y, const at::Tensor& t) { return torch::nll_loss(y, t); },
      kindling::engine::SupervisedTrainerOptions().prepare_batch(features));
  auto started = std::make_shared<std::chrono::steady_clock::time_point>();
  trainer.on(Events::ITERATION_STARTED, [started](Engine&) { *started = std::chrono::steady_clock::now(); });
  const double pace_per_sample = std::stod(f.at("--pace-ms-per-sample"));
  trainer.on(Events::ITERATION_COMPLETED, [&ledger, dir, pace_per_sample, started](Engine& e) {
    const bool stop_here = kd::get_rank() == 0 && ::access((dir + "/stop").c_str(), F_OK) == 0;
    const torch::Tensor ids = e.state().batch_as<Example>().target.select(1, 1).to(torch::kLong);
    // One gather: each rank's ids and, last, whether it asks to stop.
    const torch::Tensor mine = torch::cat({ids, torch::tensor({stop_here ? 1L : 0L})});
    const torch::Tensor all = kd::all_gather(mine.contiguous()).reshape({kd::get_world_size(), -1});
    ledger.add(e.state().epoch, all.narrow(1, 0, ids.numel()).reshape({-1}));
    if (kd::get_rank() == 0) {
      const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      std::printf("STEP t=%.3f world=%d iteration=%lld samples=%lld\n", now, kd::get_world_size(),
                  static_cast<long long>(e.state().iteration), static_cast<long long>(ids.numel() * kd::get_world_size()));
      std::fflush(stdout);
    }
    if (all.select(1, ids.numel()).sum().item<int64_t>() > 0) e.terminate();
    const auto pace = std::chrono::microseconds(static_cast<int64_t>(pace_per_sample * 1000 * ids.numel()));
    std::this_thread::sleep_until(*started + pace);
  });
  return trainer;
}

// The training split, read once per process (it does not depend on the world).
std::shared_ptr<const kindling::data::Dataset> read_split(const Flags& f) {
  return std::make_shared<Indexed>(
      dist_tutorial::fashion_mnist(f.at("--data-dir"), /*train=*/true, std::stoll(f.at("--limit"))));
}

// The loader of this rank's share: made again in every world (it depends on rank and size).
kindling::data::DataLoader make_loader(std::shared_ptr<const kindling::data::Dataset> split, const Flags& f) {
  return kd::auto_dataloader(
      std::move(split),
      kindling::data::DataLoaderOptions().batch_size(std::stoll(f.at("--batch"))).shuffle(true).seed(7));
}

void print_start() {
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  std::printf("START rank=%d world=%d restart=%s pid=%d\n", kd::get_rank(), kd::get_world_size(),
              restart ? restart : "unset", static_cast<int>(::getpid()));
  std::fflush(stdout);
}

// Rank 0 says what the final weights hold: samples, and the lost and repeated ones.
int finish(const Ledger& ledger) {
  if (kd::get_rank() == 0) {
    const torch::Tensor c = ledger.counts.to(torch::kLong);
    const int64_t epochs = c.size(0);
    const int64_t lost = epochs > 1 ? c.narrow(0, 0, epochs - 1).eq(0).sum().item<int64_t>() : 0;
    const int64_t repeated = epochs > 0 ? (c - 1).clamp_min(0).sum().item<int64_t>() : 0;
    std::printf("LEDGER samples=%lld lost=%lld repeated=%lld epochs=%lld\n",
                static_cast<long long>(epochs > 0 ? c.sum().item<int64_t>() : 0), static_cast<long long>(lost),
                static_cast<long long>(repeated), static_cast<long long>(epochs));
    std::fflush(stdout);
  }
  kd::finalize();
  return 0;
}

int train_restart(const std::string& dir, const Flags& f) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  print_start();
  auto loader = make_loader(read_split(f), f);
  torch::manual_seed(1234);
  dist_tutorial::Net net;
  auto model = kd::auto_model(net);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  Ledger ledger;
  ledger.samples = loader.dataset()->size();
  Engine trainer = make_trainer(model, optimizer, ledger, dir, f);
  kh::Objects to_save{{"trainer", kh::stateful(trainer)},
                      {"model", kh::stateful(net)},
                      {"optimizer", kh::stateful(optimizer)},
                      {"ledger", kh::stateful(ledger)}};
  auto checkpoint = std::make_shared<kh::Checkpoint>(to_save, dir, kh::CheckpointOptions().filename_prefix("goodput"));
  checkpoint->attach(trainer, {Events::ITERATION_COMPLETED.every(std::stoll(f.at("--save-every")))});
  if (auto last = kh::Checkpoint::find_latest(dir, "goodput")) kh::Checkpoint::load_objects(to_save, *last);
  trainer.run(loader, std::stoll(f.at("--epochs")));
  return finish(ledger);
}

int train_live(const std::string& dir, const Flags& f) {
  // What does not depend on the world comes first, read once: a joiner is ready sooner and a
  // world change does not read the data again.
  const auto split = read_split(f);
  kh::LiveRecovery live(kh::LiveRecoveryOptions().init_options(kd::InitOptions().timeout(std::chrono::seconds(60))));
  if (!kd::is_initialized()) kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  print_start();
  torch::manual_seed(1234);
  dist_tutorial::Net net;
  Ledger ledger;
  live.run([&](kh::LiveRecovery& self) {
    auto loader = make_loader(split, f);
    ledger.samples = loader.dataset()->size();
    auto model = kd::auto_model(net);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
    Engine trainer = make_trainer(model, optimizer, ledger, dir, f);
    self.keep({{"trainer", kh::stateful(trainer)},
               {"model", kh::stateful(net)},
               {"optimizer", kh::stateful(optimizer)},
               {"ledger", kh::stateful(ledger)}},
              trainer);
    trainer.run(loader, std::stoll(f.at("--epochs")));
  });
  return finish(ledger);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc >= 3 ? argv[1] : "";
  if (command != "live" && command != "restart") {
    std::fprintf(stderr, "usage: goodput_train live|restart DIR [--flag value]...\n");
    return 2;
  }
  const auto f = flags(argc, argv);
  return command == "live" ? train_live(argv[2], f) : train_restart(argv[2], f);
}
