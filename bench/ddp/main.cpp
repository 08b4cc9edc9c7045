// bench_ddp: samples/s of a data-parallel training step with kindling's auto_model, for the
// peer comparison with Python's torch.nn.parallel.DistributedDataParallel (ddp_python.py
// does the same work; scripts/bench-ddp.sh runs both in one go).
//
//   kindling-run --nproc_per_node 2 ./bench_ddp --model mlp --batch 64 --steps 200
//   ./bench_ddp --mode loader --workers 2 --batch 128
//   kindling-run --nproc_per_node 2 ./bench_ddp --model resnet18 --replica-check-every 5
//
// step mode: the model (mlp: 784-1024-1024-10; resnet18: torchvision's ResNet18 with 1 input
// channel and 10 classes on 28x28) trains with SGD (lr 0.01, momentum 0.9) on Fashion-MNIST
// held in memory; rank r's step s uses the batch starting at sample (s * world + r) * batch.
// After `warmup` steps every rank times `steps` steps; the slowest rank's time gives
// samples/s = steps * batch * world / seconds. One rank trains the plain model (no DDP).
// --replica-check-every N: kindling::dist::check_replicas on the model after every N-th timed
// step, each step and each check timed on its own; the RESULT line adds their medians (the
// slowest rank's) and the check's share of a step at that N and at ReplicaCheck's default.
// loader mode: samples/s of auto_dataloader over Fashion-MNIST with ToTensor, RandomCrop(28,
// padding 2) and Normalize, `workers` threads, for `epochs` epochs.
#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <kindling/dist/auto.h>
#include <kindling/dist/replica_check.h>
#include <kindling/handlers/replica_check.h>
#include <kindling/data/datasets.h>
#include <kindling/data/loader.h>
#include <kindling/data/transforms.h>
#include <kindling/kindling.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/diloco.h>
#include <kindling/nn/optimizer_in_backward.h>
#include <kindling/nn/optimizer_state.h>
#include <kindling/nn/powersgd.h>
#include <kindling/nn/sharding.h>
#include <kindling/nn/zero.h>
#include <kindling/timeline.h>

#include "cli/cli.h"
#include "options.h"
#include "workload.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kd = kindling::dist;
namespace data = kindling::data;

namespace {

using bench::Options;


// What a timed run measured on this rank.
struct Measured {
  double seconds = 0;
  std::string hook = "none";                    // the hook DDP ran (hierarchical_allreduce when it chose one)
  double backward = 0, communication_wait = 0;  // StepTimes summed over the timed steps
  int64_t state_elements = 0;                   // the optimizer's state on this rank, after the run
  double bucket_cap_mb = 0;                     // the buckets' size in the timed steps
  int64_t timeline_events = 0;                  // --timeline: the events the timed steps recorded
  int64_t param_elements = 0;                   // the parameters this rank keeps between steps
  int64_t peak_gathered = 0;                    // --sharding: the most elements gathered at once (timed steps)
  double step_rss_mb = 0;                       // the resident set's peak during the steps (warmup included)
  std::vector<double> step_seconds, check_seconds;  // --replica-check-every: each timed step, each check
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::shared_ptr<kindling::nn::CommHook> comm_hook(const Options& o) {
  if (o.comm_hook == "fp16") return kindling::nn::fp16_compress_hook();
  if (o.comm_hook == "bf16") return kindling::nn::bf16_compress_hook();
  if (o.comm_hook == "powersgd") {
    return kindling::nn::powerSGD_hook(kindling::nn::PowerSgdOptions()
                                           .matrix_approximation_rank(o.powersgd_rank)
                                           .start_powerSGD_iter(o.powersgd_start));
  }
  return nullptr;
}

// Elements of the tensors in a state dict's per-parameter state (torch's layout).
int64_t tensor_elements(const kindling::StateDict& sd) {
  int64_t n = 0;
  for (const auto& kv : sd.at("state").toGenericDict())
    for (const auto& e : kv.value().toGenericDict())
      if (e.value().isTensor()) n += e.value().toTensor().numel();
  return n;
}

// The optimizer's state this rank holds.
int64_t state_elements(const torch::optim::Optimizer& opt) {
  if (auto* zero = dynamic_cast<const kindling::nn::ZeroRedundancyOptimizer*>(&opt)) return zero->local_state_numel();
  // DiLoCo's state_dict gathers every worker's part: not this rank's alone; not measured (-1).
  if (dynamic_cast<const kindling::nn::DiLoCo*>(&opt) != nullptr) return -1;
  if (auto* own = dynamic_cast<const kindling::nn::SelfStatedOptimizer*>(&opt)) return tensor_elements(own->state_dict());
  return tensor_elements(kindling::nn::optimizer_state_dict(opt));
}

double seconds_between(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

// --replica-check-every: timed step `s`, then the replica check after every N-th, each timed apart.
template <class Step, class Check>
void time_step_and_check(Measured& m, const Options& o, int s, Step&& step, Check&& check) {
  const auto t0 = std::chrono::steady_clock::now();
  step();
  const auto t1 = std::chrono::steady_clock::now();
  m.step_seconds.push_back(seconds_between(t0, t1));
  if ((s + 1) % o.replica_check_every != 0) return;
  // The ranks leave a step apart (the last bucket's wait, the optimizer): met first, untimed, so
  // that the check's time is its own and not a skew the next step's all-reduce absorbs anyway.
  kd::barrier();
  const auto t2 = std::chrono::steady_clock::now();
  check();
  m.check_seconds.push_back(seconds_between(t2, std::chrono::steady_clock::now()));
}

// The slowest rank's median of `values` (0 for none).
double median_over_ranks(std::vector<double> values) {
  if (values.empty()) return kd::all_reduce(0.0, kd::ReduceOp::kMax);
  std::sort(values.begin(), values.end());
  return kd::all_reduce(values[values.size() / 2], kd::ReduceOp::kMax);
}

// --timeline: rank 0 prints each span's milliseconds per timed step (the step's parts and the
// collectives the timeline records), what makes one variant slower than another.
void print_breakdown(const std::vector<kindling::timeline::TimelineEvent>& events, int steps) {
  std::map<std::string, double> ms;
  for (const auto& e : events) ms[e.name] += (e.end_ns - e.start_ns) / 1e6 / steps;
  if (kd::get_rank() != 0) return;
  std::printf("BREAKDOWN");
  for (const auto& [name, per_step] : ms) std::printf(" %s=%.1f", name.c_str(), per_step);
  std::printf("\n");
}

// The timed steps of `model` (DDP or sharded) with `opt`; `net` is the module inside.
// The kernel's high-water mark of this process's resident set (VmHWM), MB; 0 where unknown.
// Written "5" to /proc/self/clear_refs first (Linux >= 4.0), it counts from there.
double peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

template <class Model, class Net>
void run_steps(Measured& m, Model& model, Net& net, torch::optim::Optimizer& opt, const Options& o,
               const std::pair<at::Tensor, at::Tensor>& data) {
  const int rank = kd::get_rank(), world = kd::get_world_size();
  constexpr bool ddp = std::is_same<Model, kindling::nn::DistributedDataParallel<typename Net::ContainedType>>::value;
  // The parts marked as the supervised trainer marks them (kindling/timeline.h): one atomic load
  // each while no timeline records; recorded in the timed steps with --timeline.
  using kindling::timeline::Lane;
  using kindling::timeline::Span;
  auto step = [&](int s) {
    auto [x, y] = bench::step_batch(data, s, rank, world, o.batch);
    {
      Span span("zero_grad", Lane::kStep);
      opt.zero_grad();
    }
    at::Tensor y_pred;
    {
      Span span("forward", Lane::kStep);
      y_pred = model(x);
    }
    at::Tensor loss;
    {
      Span span("loss", Lane::kStep);
      loss = torch::nn::functional::cross_entropy(y_pred, y);
    }
    {
      Span span("backward", Lane::kStep);
      loss.backward();
    }
    Span span("optimizer step", Lane::kStep);
    opt.step();
  };
  std::ofstream("/proc/self/clear_refs") << "5";  // the steps' peak, not the model's construction
  for (int s = 0; s < o.warmup; ++s) step(s);
  kd::barrier();
  // Where the timed steps begin: bench/cluster reads the links' byte counters here.
  if (kd::get_rank() == 0) std::cout << "TIMING_STARTS" << std::endl;
  if constexpr (!ddp) model.sharded()->reset_peaks();
  if (o.timeline) kindling::timeline::start_recording();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < o.steps; ++s) {
    if constexpr (ddp) {
      if (o.replica_check_every > 0)
        time_step_and_check(m, o, s, [&] { step(o.warmup + s); }, [&] { kd::check_replicas(*net); });
      else
        step(o.warmup + s);
      if (auto* r = model.reducer()) {
        m.backward += r->last_step_times().backward;
        m.communication_wait += r->last_step_times().communication_wait;
      }
    } else {
      step(o.warmup + s);
    }
  }
  m.seconds = seconds_since(t0);
  m.step_rss_mb = peak_rss_mb();
  if (o.timeline) {
    const auto events = kindling::timeline::stop_recording();
    m.timeline_events = static_cast<int64_t>(events.size());
    print_breakdown(events, o.steps);
  }
  if constexpr (ddp) {
    if (auto* r = model.reducer()) {
      m.hook = r->comm_hook_name();
      m.bucket_cap_mb = r->bucket_cap_mb();
    }
    for (const auto& p : net->parameters()) m.param_elements += p.numel();
  } else {
    m.hook = o.sharding;
    m.param_elements = model.sharded()->resident_parameter_numel();
    m.peak_gathered = model.sharded()->peak_gathered_numel();
  }
  m.state_elements = state_elements(opt);
}

// --diloco-every: DiLoCo over the SGD; DDP with DiLoCo's hook (no average after the warm-up) and
// no buffer broadcast, as examples/cifar10 runs it.
template <class Module>
Measured train_diloco(Module net, const Options& o, const std::pair<at::Tensor, at::Tensor>& data) {
  torch::optim::SGD inner(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto options = o.local_sgd ? kindling::nn::DiLoCoOptions::local_sgd(o.diloco_every)
                             : kindling::nn::DiLoCoOptions().sync_every(o.diloco_every);
  options.fragments(o.diloco_fragments).fragment_sync_delay(o.diloco_delay);
  if (o.diloco_exchange != "float32") options.exchange_dtype(o.diloco_exchange == "bf16" ? at::kBFloat16 : at::kHalf);
  kindling::nn::DiLoCo diloco(*net, inner, options);
  auto model = kd::auto_model(net, kindling::nn::DdpOptions().comm_hook(diloco.comm_hook()).broadcast_buffers(false));
  Measured m;
  run_steps(m, model, net, diloco, o, data);
  m.hook = o.local_sgd ? "local_sgd" : "diloco";
  return m;
}

template <class Module>
Measured train(Module net, const Options& o, const std::pair<at::Tensor, at::Tensor>& data) {
  const auto sgd = torch::optim::SGDOptions(0.01).momentum(0.9);
  Measured m;
  if (o.sharding != "none") {
    auto model = kd::auto_model(net, kindling::nn::ShardingOptions().reshard_after_forward(o.sharding == "zero3"));
    torch::optim::SGD opt(model.parameters(), sgd);
    if (o.in_backward) model.step_in_backward(opt);
    run_steps(m, model, net, opt, o, data);
    return m;
  }
  if (o.diloco_every > 0) return train_diloco(net, o, data);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (o.zero || o.zero_overlap)
    optimizer = std::make_unique<kindling::nn::ZeroRedundancyOptimizer>(
        net->parameters(), sgd, kindling::nn::ZeroOptions().overlap_with_ddp(o.zero_overlap));
  if (o.in_backward) optimizer = std::make_unique<kindling::nn::OptimizerInBackward>(net->parameters(), sgd);
  auto* zero = dynamic_cast<kindling::nn::ZeroRedundancyOptimizer*>(optimizer.get());
  auto* in_backward = dynamic_cast<kindling::nn::OptimizerInBackward*>(optimizer.get());
  std::shared_ptr<kindling::nn::CommHook> hook = comm_hook(o);
  if (zero) hook = zero->comm_hook();
  if (in_backward) hook = in_backward->comm_hook(hook);
  auto model = kd::auto_model(net, kindling::nn::DdpOptions()
                                       .bucket_cap_mb(o.bucket_cap_mb)
                                       .comm_hook(hook)
                                       .hierarchical_allreduce(!o.flat)
                                       .gradient_as_bucket_view(!o.copy_gradients)
                                       .autotune_bucket_cap_mb(o.autotune_mb)
                                       .autotune_steps(3));
  if (!optimizer) optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), sgd);
  run_steps(m, model, net, *optimizer, o, data);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"samples/s of a data-parallel training step (or of the loader) through kindling", "bench_ddp"};
  bench::describe_options(app, o);
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
  at::set_num_threads(o.threads);
  try {
    const bool distributed = std::getenv("WORLD_SIZE") && std::string(std::getenv("WORLD_SIZE")) != "1";
    kd::initialize(distributed || o.backend == "mpi" ? o.backend : "serial");
    const int world = kd::get_world_size();
    data::FashionMNIST train_set(o.data_dir, true);
    if (o.mode == "loader") {
      auto ds = std::make_shared<data::TransformedDataset>(
          std::make_shared<data::FashionMNIST>(train_set),
          data::transforms::Compose({data::transforms::ToTensor(),
                                     data::transforms::RandomCrop(28, data::transforms::RandomCropOptions().padding(2)),
                                     data::transforms::Normalize({0.2860}, {0.3530})}));
      auto loader = kd::auto_dataloader(
          ds, data::DataLoaderOptions().batch_size(o.batch * world).num_workers(o.workers * world).shuffle(true));
      int64_t samples = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int e = 0; e < o.epochs; ++e) {
        for (const auto& b : loader) samples += b.data.size(0);
      }
      const double secs = seconds_since(t0);
      if (kd::get_rank() == 0) {
        std::printf(
            "RESULT impl=kindling mode=loader ranks=%d batch=%lld workers=%lld samples=%lld seconds=%.4f "
            "samples_per_s=%.1f\n",
            world, static_cast<long long>(o.batch), static_cast<long long>(o.workers), static_cast<long long>(samples),
            secs, samples / secs);
      }
      kd::finalize();
      return 0;
    }
    const auto data = bench::training_data(o.data_dir);
    Measured m;
    bench::with_model(o.model, [&](auto net) { m = train(net, o, data); }, o.mlp_width, o.mlp_depth);
    const double secs = kd::all_reduce(m.seconds, kd::ReduceOp::kMax);
    const int64_t state = kd::all_reduce(m.state_elements, kd::ReduceOp::kMax);
    const int64_t params = kd::all_reduce(m.param_elements, kd::ReduceOp::kMax);
    const int64_t peak = kd::all_reduce(m.peak_gathered, kd::ReduceOp::kMax);
    const double step_rss = kd::all_reduce(m.step_rss_mb, kd::ReduceOp::kMax);
    if (kd::get_rank() == 0) {
      const double samples = static_cast<double>(o.steps) * o.batch * world;
      std::printf(
          "RESULT impl=kindling mode=step model=%s ranks=%d batch=%lld threads=%d steps=%d hook=%s views=%d seconds=%.4f "
          "samples_per_s=%.1f backward_ms=%.1f comm_wait_ms=%.1f state_elements=%lld bucket_mb=%g "
          "timeline_events=%lld param_elements=%lld peak_gathered=%lld step_rss_mb=%.1f\n",
          o.model.c_str(), world, static_cast<long long>(o.batch), o.threads, o.steps, m.hook.c_str(), o.copy_gradients ? 0 : 1, secs,
          samples / secs, 1e3 * m.backward / o.steps, 1e3 * m.communication_wait / o.steps, static_cast<long long>(state), m.bucket_cap_mb,
          static_cast<long long>(m.timeline_events), static_cast<long long>(params), static_cast<long long>(peak),
          step_rss);
    }
    if (o.replica_check_every > 0) {
      const double step_s = median_over_ranks(m.step_seconds), check_s = median_over_ranks(m.check_seconds);
      if (kd::get_rank() == 0)
        std::printf("REPLICA_CHECK every=%d step_ms=%.3f check_ms=%.3f share=%.6f share_every_%lld=%.6f\n",
                    o.replica_check_every, 1e3 * step_s, 1e3 * check_s, check_s / (o.replica_check_every * step_s),
                    static_cast<long long>(kindling::handlers::ReplicaCheck::kDefaultEvery),
                    check_s / (kindling::handlers::ReplicaCheck::kDefaultEvery * step_s));
    }
    kd::finalize();
  } catch (const std::exception& e) {
    std::cerr << "bench_ddp: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
