// bench_reducer: kindling's DistributedDataParallel against PyTorch's own DDP engine,
// c10d::Reducer (the class Python's torch.nn.parallel.DistributedDataParallel drives), in one
// run: the same model and data (workload.h), the same buckets (kindling's assignment handed to
// the Reducer, which is not rebuilt), the same c10d gloo process group (made here and given to
// kindling with use_process_group), rounds interleaved, medians reported.
//
//   kindling-run --nproc_per_node 2 ./bench_reducer --model resnet18 --batch 32 --steps 20 --rounds 5
//
// Each round trains both for `steps` steps (after `warmup` untimed ones in the first round);
// the slowest rank's time gives samples/s. The Reducer is driven as Python's DDP drives it in
// the common case (no unused parameters, no static graph): prepare_for_forward, forward,
// prepare_for_backward, backward; its autograd hooks average the gradients, dividing each by
// the world size as it enters its bucket. On LibTorch 1.13 its header needs a file that 1.13
// does not ship (torch113/, see there).
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <kindling/dist/auto.h>
#include <kindling/dist/c10d.h>
#include <kindling/kindling.h>
#include <kindling/nn/ddp.h>

#include "cli/cli.h"
#include "workload.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace kd = kindling::dist;

namespace {

struct Options {
  std::string model = "mlp";
  std::string data_dir = kindling::data::kFashionMnistRoot;
  int64_t batch = 64;
  int steps = 20;
  int warmup = 5;
  int rounds = 5;
  int threads = 1;
  double bucket_cap_mb = 25;
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// The c10d gloo process group both implementations use, on its own store (the next port).
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(c10::intrusive_ptr<c10d::Store>& store) {
  const int rank = std::stoi(env_or("RANK", "0")), world = std::stoi(env_or("WORLD_SIZE", "1"));
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(std::stoi(env_or("MASTER_PORT", "29500")) + 1);
  so.isServer = rank == 0;
  so.numWorkers = world;
  so.waitWorkers = rank != 0;
  so.timeout = std::chrono::seconds(60);
  store = c10::make_intrusive<c10d::PrefixStore>(
      "bench", c10::make_intrusive<c10d::TCPStore>(env_or("MASTER_ADDR", "127.0.0.1"), so));
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto engine = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
#if TORCH_VERSION_MAJOR >= 2
  // In 2.x an engine is a c10d::Backend; the Reducer takes a ProcessGroup that serves the CPU with it.
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world);
  pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, engine);
  return pg;
#else
  return engine;
#endif
}

// The Reducer's constructor changed across LibTorch releases: 1.13 to about 2.7 take the
// per-bucket size limits third; later releases drop them and add three settings. Chosen by
// what compiles, not by version number (the release boundaries are not documented).
template <typename R>
std::shared_ptr<R> make_reducer(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> buckets,
                                c10::intrusive_ptr<c10d::ProcessGroup> pg, int64_t cap,
                                std::unordered_map<size_t, std::string> names) {
  constexpr int64_t first_cap = 1 << 20;
  if constexpr (std::is_constructible_v<R, std::vector<at::Tensor>, std::vector<std::vector<size_t>>,
                                        std::vector<size_t>, c10::intrusive_ptr<c10d::ProcessGroup>, std::vector<bool>,
                                        int64_t, bool, bool, std::unordered_map<size_t, std::string>, int64_t>) {
    std::vector<size_t> limits(buckets.size(), static_cast<size_t>(cap));
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(limits), std::move(pg),
                               std::vector<bool>(), cap, false, false, std::move(names), first_cap);
  } else {
    return std::make_shared<R>(std::move(params), std::move(buckets), std::move(pg), std::vector<bool>(), cap, false,
                               false, std::move(names), first_cap, false, false, std::vector<int64_t>());
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Times `steps` calls of `step` (the slowest rank's time).
template <typename Step>
double timed(int first, int steps, Step&& step) {
  kd::barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step(first + s);
  return kd::all_reduce(seconds_since(t0), kd::ReduceOp::kMax);
}

template <class Module>
void race(Module net, Module twin, const Options& o, const std::pair<at::Tensor, at::Tensor>& data,
          const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  const int rank = kd::get_rank(), world = kd::get_world_size();
  auto model = kd::auto_model(net, kindling::nn::DdpOptions().bucket_cap_mb(o.bucket_cap_mb));
  // The Reducer gets kindling's buckets, by parameter index.
  std::vector<at::Tensor> params;
  std::map<std::string, size_t> index;
  std::unordered_map<size_t, std::string> names;
  for (const auto& item : twin->named_parameters()) {
    index[item.key()] = params.size();
    names[params.size()] = item.key();
    params.push_back(item.value());
  }
  std::vector<std::vector<size_t>> buckets;
  for (const auto& bucket : model.reducer()->buckets()) {
    buckets.emplace_back();
    for (const auto& name : bucket) buckets.back().push_back(index.at(name));
  }
  const auto cap = static_cast<int64_t>(o.bucket_cap_mb * (1 << 20));
  auto reducer = make_reducer<c10d::Reducer>(params, buckets, pg, cap, names);
  auto logger = std::make_shared<c10d::Logger>(reducer);  // the Reducer dereferences its logger
  reducer->set_logger(logger);

  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::optim::SGD twin_opt(twin->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto kindling_step = [&](int s) {
    auto [x, y] = bench::step_batch(data, s, rank, world, o.batch);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model(x), y).backward();
    opt.step();
  };
  auto reducer_step = [&](int s) {
    auto [x, y] = bench::step_batch(data, s, rank, world, o.batch);
    twin_opt.zero_grad();
    reducer->prepare_for_forward();
    auto out = twin->forward(x);
    reducer->prepare_for_backward({});
    torch::nn::functional::cross_entropy(out, y).backward();
    twin_opt.step();
  };
  for (int s = 0; s < o.warmup; ++s) {
    kindling_step(s);
    reducer_step(s);
  }
  std::vector<double> k_rate, r_rate;
  const double samples = static_cast<double>(o.steps) * o.batch * world;
  for (int round = 0; round < o.rounds; ++round) {
    const int first = o.warmup + round * o.steps;
    // Alternate which goes first, so that neither always follows the other.
    if (round % 2 == 0) {
      k_rate.push_back(samples / timed(first, o.steps, kindling_step));
      r_rate.push_back(samples / timed(first, o.steps, reducer_step));
    } else {
      r_rate.push_back(samples / timed(first, o.steps, reducer_step));
      k_rate.push_back(samples / timed(first, o.steps, kindling_step));
    }
  }
  // Both trained on the same data from the same weights: they should still agree.
  double max_diff = 0;
  auto theirs = twin->named_parameters();
  for (const auto& item : model->named_parameters()) {
    max_diff = std::max(max_diff, (item.value() - theirs[item.key()]).abs().max().template item<double>());
  }
  if (rank == 0) {
    std::printf(
        "RESULT bench=reducer model=%s ranks=%d batch=%lld threads=%d steps=%d rounds=%d buckets=%zu "
        "kindling_samples_per_s=%.1f reducer_samples_per_s=%.1f ratio=%.3f max_weight_difference=%.3g\n",
        o.model.c_str(), world, static_cast<long long>(o.batch), o.threads, o.steps, o.rounds, buckets.size(),
        median(k_rate), median(r_rate), median(k_rate) / median(r_rate), max_diff);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kindling's DDP vs PyTorch's c10d::Reducer: samples/s of the same training step", "bench_reducer"};
  app.add_option("--model", o.model, "mlp or resnet18")
      ->check(CLI::IsMember({"mlp", "resnet18"}))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST directory")->capture_default_str();
  app.add_option("--batch", o.batch, "Samples per rank and step")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps per round")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--rounds", o.rounds, "Rounds (each times both)")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op threads per rank")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--bucket-cap-mb", o.bucket_cap_mb, "Bucket size")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
  at::set_num_threads(o.threads);
  try {
    if (env_or("WORLD_SIZE", "1") == "1") {
      std::cerr << "bench_reducer: run it with several ranks (kindling-run --nproc_per_node 2 ...)\n";
      return 2;
    }
    c10::intrusive_ptr<c10d::Store> store;
    auto pg = make_gloo_group(store);
    kd::use_process_group(pg, store, "gloo");
    const auto data = bench::training_data(o.data_dir);
    if (o.model == "mlp") {
      race(bench::make_mlp(), bench::make_mlp(), o, data, pg);
    } else {
      race(bench::make_resnet18(), bench::make_resnet18(), o, data, pg);
    }
    kd::finalize();
  } catch (const std::exception& e) {
    std::cerr << "bench_reducer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
