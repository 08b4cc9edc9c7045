// bench_engine (Google Benchmark): the cost of kindling::engine's machinery.
//   Dispatch/N       one fire of an event with N handlers attached (0, 10, 100)
//   AccuracyUpdate   Accuracy::update on a (512, 10) batch; AccuracyCompute its compute
//   Epoch/loop       one epoch of the bench/ddp MLP (784-1024-1024-10, SGD) over 20 in-memory
//                    Fashion-MNIST batches of 64, hand-written loop
//   Epoch/engine     the same epoch through create_supervised_trainer
//   Epoch/2          the same, a timeline recording every step (kindling/timeline.h: the engine's,
//                    the trainer's spans)
//   TimelineSpan/N   one timeline span, no timeline recording (0) or one recording (1)
//   LiveCommit/N     what kh::LiveRecovery does after an iteration when it commits (the state
//                    dict of every kept object, pickled in memory): N = 0 the MLP above with its
//                    SGD momentum buffers (about 15 MB), N = 1 a ResNet-18 (10 classes) with its
//                    own (about 90 MB); the cost of LiveRecoveryOptions::commit_every's commits
//   ReplicaCheck/N   N = 0 one training step of a ResNet-18 (1 input channel, 10 classes, SGD
//                    momentum) on a batch of 32 28x28 images; N = 1 kindling::dist::check_replicas
//                    on its parameters (their fingerprints; the serial model gathers nothing:
//                    bench_ddp --replica-check-every times it on real ranks)
// scripts/bench-engine.sh runs it with repetitions and prints the medians and the ratio.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <kindling/data/datasets.h>
#include <kindling/engine/engine.h>
#include <kindling/engine/supervised.h>
#include <kindling/dist/replica_check.h>
#include <kindling/handlers/checkpointing/live_recovery.h>
#include <kindling/handlers/profilers/timeline.h>
#include <kindling/models/resnet.h>
#include <kindling/timeline.h>
#include <kindling/metrics/accuracy.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using kindling::data::Example;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

void Dispatch(benchmark::State& st) {
  Engine engine([](Engine&, const int& b) -> Value { return b; });
  int64_t calls = 0;
  for (int64_t i = 0; i < st.range(0); ++i) engine.on(Events::ITERATION_COMPLETED, [&calls](Engine&) { ++calls; });
  for (auto _ : st) engine.fire_event(Events::ITERATION_COMPLETED);
  benchmark::DoNotOptimize(calls);
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(Dispatch)->Arg(0)->Arg(10)->Arg(100);

Value accuracy_batch() {
  at::manual_seed(0);
  return {at::randn({512, 10}), at::randint(10, {512}, at::kLong)};
}

void AccuracyUpdate(benchmark::State& st) {
  kindling::metrics::Accuracy acc;
  const Value batch = accuracy_batch();
  for (auto _ : st) acc.update(batch);
  st.SetItemsProcessed(st.iterations() * 512);
}
BENCHMARK(AccuracyUpdate);

void AccuracyCompute(benchmark::State& st) {
  kindling::metrics::Accuracy acc;
  acc.update(accuracy_batch());
  for (auto _ : st) benchmark::DoNotOptimize(acc.compute());
}
BENCHMARK(AccuracyCompute);

// One kindling::timeline::Span: while no timeline records (0) and while one does (1). The
// recording starts over every 65536 spans (untimed), so that memory stays bounded and no span
// is dropped (a dropped one would cost less).
void TimelineSpan(benchmark::State& st) {
  const bool on = st.range(0) == 1;
  if (on) kindling::timeline::start_recording();
  int64_t n = 0;
  for (auto _ : st) {
    { kindling::timeline::Span span("bench", kindling::timeline::Lane::kStep); }
    if (on && ++n % 65536 == 0) {
      st.PauseTiming();
      kindling::timeline::start_recording();
      st.ResumeTiming();
    }
  }
  if (on) kindling::timeline::stop_recording();
}
BENCHMARK(TimelineSpan)->Arg(0)->Arg(1);

constexpr int64_t kBatch = 64, kBatches = 20;

std::vector<Example> fashion_batches() {
  kindling::data::FashionMNIST train(kindling::data::kFashionMnistRoot, /*train=*/true);
  const at::Tensor images = (train.images().to(at::kFloat) / 255.0 - 0.2860) / 0.3530;
  std::vector<Example> out;
  for (int64_t b = 0; b < kBatches; ++b) {
    out.push_back({images.narrow(0, b * kBatch, kBatch).contiguous(),
                   train.targets().narrow(0, b * kBatch, kBatch).contiguous()});
  }
  return out;
}

torch::nn::Sequential mlp() {
  at::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 1024), torch::nn::ReLU(),
                               torch::nn::Linear(1024, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 10));
}

at::Tensor loss_fn(const at::Tensor& y_pred, const at::Tensor& y) { return at::cross_entropy_loss(y_pred, y); }

void Epoch(benchmark::State& st) {
  const int64_t mode = st.range(0);  // 0: the loop by hand; 1: the engine; 2: the engine, a timeline recording
  static const std::vector<Example> data = fashion_batches();
  auto net = mlp();
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  Engine trainer = kindling::engine::create_supervised_trainer(net, optimizer, loss_fn);
  kindling::handlers::Timeline timeline;  // watch(): the engine's spans whenever a timeline records
  if (mode == 2) timeline.watch(trainer, "");
  int64_t events = 0;
  for (auto _ : st) {
    if (mode == 2) kindling::timeline::start_recording();
    if (mode >= 1) {
      trainer.run(data, 1);
    } else {
      for (const Example& b : data) {
        optimizer.zero_grad();
        net->train(true);
        at::Tensor loss = loss_fn(net->forward(b.data), b.target);
        loss.backward();
        optimizer.step();
        benchmark::DoNotOptimize(loss.item<double>());
      }
    }
    if (mode == 2) {  // the end of a range: not a step's cost
      st.PauseTiming();
      events = static_cast<int64_t>(kindling::timeline::stop_recording().size());
      st.ResumeTiming();
    }
  }
  st.SetItemsProcessed(st.iterations() * kBatch * kBatches);
  st.SetLabel(mode == 0 ? "loop" : mode == 1 ? "engine" : std::string("engine+timeline ") + std::to_string(events / kBatches) + " events/step");
}
BENCHMARK(Epoch)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

void LiveCommit(benchmark::State& st) {
  std::shared_ptr<torch::nn::Module> net =
      st.range(0) == 0 ? mlp().ptr()
                       : std::static_pointer_cast<torch::nn::Module>(
                             kindling::models::resnet18(kindling::models::ResNetOptions().num_classes(10)).ptr());
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  for (auto& p : net->parameters()) p.mutable_grad() = at::ones_like(p);
  optimizer.step();  // the momentum buffers exist, as after a first step
  namespace kh = kindling::handlers;
  kh::LiveRecovery live(kh::LiveRecoveryOptions().backend("serial"));
  live.run([&](kh::LiveRecovery& self) {
    Engine engine([](Engine&, const int&) -> Value { return 0.0; });
    self.keep({{"model", kh::stateful(net)}, {"optimizer", kh::stateful(optimizer)}}, engine);
    // ITERATION_COMPLETED at iteration 0: keep()'s handler commits (no launcher: no agreement).
    for (auto _ : st) engine.fire_event(Events::ITERATION_COMPLETED);
  });
  int64_t bytes = 0;
  for (const auto& p : net->parameters()) bytes += 2 * p.numel() * p.element_size();
  st.SetBytesProcessed(st.iterations() * bytes);
  st.SetLabel(st.range(0) == 0 ? "mlp" : "resnet18");
}
BENCHMARK(LiveCommit)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void ReplicaCheck(benchmark::State& st) {
  at::manual_seed(0);
  auto net = kindling::models::resnet18(kindling::models::ResNetOptions().num_classes(10).in_channels(1));
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const at::Tensor x = at::randn({32, 1, 28, 28}), y = at::randint(10, {32}, at::kLong);
  for (auto _ : st) {
    if (st.range(0) == 1) {
      kindling::dist::check_replicas(*net);
      continue;
    }
    optimizer.zero_grad();
    loss_fn(net->forward(x), y).backward();
    optimizer.step();
  }
  st.SetLabel(st.range(0) == 0 ? "resnet18 step" : "resnet18 check_replicas");
}
BENCHMARK(ReplicaCheck)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
