// GPU tests: every name ends in _CUDA (select them with --gtest_filter='*_CUDA' or
// ctest -R _CUDA). Where LibTorch sees no CUDA device they are skipped with the reason.
// nccl at world size 1 (one GPU allows no more); several ranks on CUDA tensors with gloo,
// which lets ranks share one GPU; DDP, SyncBatchNorm and the data loader on the GPU.
#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/kindling.h>
#include <kindling/data/loader.h>
#include <kindling/engine/amp.h>
#include <kindling/engine/supervised.h>
#include <kindling/metrics/accuracy.h>
#include <kindling/metrics/loss.h>
#include <kindling/nn/batchnorm.h>
#include <kindling/nn/ddp.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <stdlib.h>

#include <cmath>

#if __has_include(<c10/core/CachingDeviceAllocator.h>)  // LibTorch 2.x
#include <c10/core/CachingDeviceAllocator.h>
#endif

#include "kindling/handlers/checkpointing/checkpoint.h"

#include "cuda/cuda_support.h"
#include "support/models.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace knn = kindling::nn;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::Mlp;
using kindling::testing::run_ranks;
using kindling::testing::run_workers;

namespace {

const at::TensorOptions kGpuFloat = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);

bool same(const at::Tensor& a, const at::Tensor& b) { return a.sizes() == b.sizes() && at::equal(a.cpu(), b.cpu()); }

// Every collective of the API on CUDA tensors of the current backend; values computed
// from the rank so that each result is checked exactly.
KINDLING_WORKER(cuda_collectives) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int r = kd::get_rank(), n = kd::get_world_size();
  const auto dev = kd::device();
  WCHECK(dev.is_cuda(), << dev);
  WCHECK(dev.index() == kd::get_local_rank() % static_cast<int>(at::detail::getCUDAHooks().getNumGPUs()), << dev);
  const double sum = n * (n + 1) / 2.0;

  auto t = at::full({5}, r + 1.0, kGpuFloat.device(dev));
  WCHECK(kd::all_reduce(t).is_same(t), << "in place on the GPU");
  WCHECK(same(t, at::full({5}, sum, kGpuFloat)), << t);
  for (auto op : {kd::ReduceOp::kProduct, kd::ReduceOp::kMin, kd::ReduceOp::kMax}) {
    auto u = kd::all_reduce(at::full({3}, r + 1.0, kGpuFloat.device(dev)), op);
    double want = op == kd::ReduceOp::kMin ? 1 : n;  // max: n
    if (op == kd::ReduceOp::kProduct) {
      want = 1;
      for (int i = 1; i <= n; ++i) want *= i;
    }
    WCHECK(same(u, at::full({3}, want, kGpuFloat)), << kd::to_string(op) << " " << u);
  }
  auto half = kd::all_reduce(at::full({4}, r + 1.0, kGpuFloat.dtype(at::kHalf).device(dev)));
  WCHECK(same(half, at::full({4}, sum, kGpuFloat.dtype(at::kHalf))), << half);
  auto ints = kd::all_reduce(at::full({4}, int64_t{r + 1}, at::TensorOptions().dtype(at::kLong).device(dev)));
  WCHECK(ints[0].item<int64_t>() == static_cast<int64_t>(sum), << ints);
  // A CPU tensor is reduced on the device and comes back on the CPU.
  auto cpu = kd::all_reduce(at::full({2}, r + 1.0));
  WCHECK(cpu.device().is_cpu() && cpu[0].item<double>() == sum, << cpu);

  auto b = kd::broadcast(at::full({3}, r == n - 1 ? 7.0 : 0.0, kGpuFloat.device(dev)), n - 1);
  WCHECK(same(b, at::full({3}, 7.0, kGpuFloat)), << b);
  auto g = kd::all_gather(at::full({2}, r * 1.0, kGpuFloat.device(dev)));
  WCHECK(g.device() == dev && g.size(0) == 2 * n, << g.sizes());
  for (int i = 0; i < n; ++i) WCHECK(g[2 * i].item<float>() == i);
  auto red = kd::reduce(at::full({2}, r + 1.0, kGpuFloat.device(dev)), 0);
  if (r == 0) WCHECK(red[0].item<float>() == sum, << red);
  auto gathered = kd::gather(at::full({1}, r * 3.0, kGpuFloat.device(dev)), 0);
  if (r == 0) {
    WCHECK(static_cast<int>(gathered.size()) == n);
    for (int i = 0; i < n; ++i) WCHECK(gathered[i].item<float>() == i * 3);
  }
  std::vector<at::Tensor> chunks;
  if (r == 0)
    for (int i = 0; i < n; ++i) chunks.push_back(at::full({2}, i * 10.0, kGpuFloat.device(dev)));
  auto sc = kd::scatter(at::empty({2}, kGpuFloat.device(dev)), chunks, 0);
  WCHECK(sc[1].item<float>() == r * 10, << sc);
  std::vector<at::Tensor> to_all;
  for (int i = 0; i < n; ++i) to_all.push_back(at::full({i + 1}, r * 100.0 + i, kGpuFloat.device(dev)));
  auto from_all = kd::all_to_all(to_all);
  for (int i = 0; i < n; ++i) {
    WCHECK(from_all[i].size(0) == r + 1 && from_all[i][0].item<float>() == i * 100 + r, << from_all[i]);
  }
  auto w = kd::all_reduce_async(at::ones({1024}, kGpuFloat.device(dev)));
  w.wait();
  kd::barrier();

  // Objects and strings travel as byte tensors on the device.
  auto names = kd::all_gather(std::string("rank-") + std::to_string(r));
  WCHECK(static_cast<int>(names.size()) == n && names.back() == "rank-" + std::to_string(n - 1));
  WCHECK(kd::broadcast(std::string(r == 0 ? "from zero" : ""), 0) == "from zero");
  WCHECK(kd::all_reduce(r + 1) == static_cast<int>(sum));
  auto objs = kd::all_gather_object(std::vector<double>{r * 0.5, 1.0});
  WCHECK(static_cast<int>(objs.size()) == n && objs.back()[0] == (n - 1) * 0.5);

  auto sub = kd::new_group({0});
  auto s = kd::all_reduce(at::full({1}, 2.0, kGpuFloat.device(dev)), kd::ReduceOp::kSum, sub);
  WCHECK(s.item<float>() == 2.0f, << "a one-member group returns its own value");
  kd::finalize();
}

TEST(NcclTest, EveryCollectiveAtWorldSizeOne_CUDA) {
  SKIP_WITHOUT_NCCL();
  run_ranks("cuda_collectives", "nccl", 1);
}

TEST(GlooOnCudaTest, EveryCollectiveTwoRanks_CUDA) {
  SKIP_WITHOUT_CUDA();
  run_ranks("cuda_collectives", "gloo", 2);
}

TEST(GlooOnCudaTest, EveryCollectiveThreeRanks_CUDA) {
  SKIP_WITHOUT_CUDA();
  run_ranks("cuda_collectives", "gloo", 3);
}

KINDLING_WORKER(nccl_more_ranks_than_gpus) {
  std::string what;
  try {
    kd::initialize("nccl", kd::InitOptions().timeout(std::chrono::seconds(30)));
  } catch (const kindling::Error& e) {
    what = e.what();
  }
  const int gpus = static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
  if (kd::get_rank() < gpus && what.empty()) return;  // this rank had a GPU of its own
  WCHECK(what.find("CUDA device(s)") != std::string::npos && what.find("use gloo") != std::string::npos, << what);
}

// NCCL cannot give two ranks one GPU: the rank without a GPU of its own says so instead of
// failing inside NCCL. (With as many GPUs as ranks this initializes and passes.)
TEST(NcclTest, RefusesMoreRanksThanGpus_CUDA) {
  SKIP_WITHOUT_NCCL();
  const int gpus = static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
  if (gpus > 1) GTEST_SKIP() << "needs a node with one GPU, this one has " << gpus;
  LaunchOptions opts;
  opts.world_size = 2;
  opts.backend = "nccl";
  auto results = run_workers("nccl_more_ranks_than_gpus", opts);
  EXPECT_TRUE(results.at(1).ok()) << describe(results);
}

// auto_model on the GPU: the module moves to device(), gradients are averaged in buckets on
// the GPU and equal one process's full-batch gradients; replicas stay identical.
KINDLING_WORKER(cuda_ddp) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int r = kd::get_rank(), n = kd::get_world_size();
  torch::manual_seed(3);
  auto model = kd::auto_model(std::make_shared<Mlp>(), knn::DdpOptions().bucket_cap_mb(0.002));
  torch::manual_seed(3);
  auto reference = std::make_shared<Mlp>();
  reference->to(kd::device());
  for (const auto& p : model->parameters()) WCHECK(p.device() == kd::device(), << p.device());
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 4; ++step) {
    torch::manual_seed(50 + step);
    auto x = torch::randn({8 * n, 20}).to(kd::device());
    auto y = torch::randn({8 * n, 5}).to(kd::device());
    opt.zero_grad();
    ref_opt.zero_grad();
    torch::mse_loss(model(x.narrow(0, 8 * r, 8)), y.narrow(0, 8 * r, 8)).backward();
    torch::mse_loss(reference->forward(x), y).backward();
    auto q = reference->named_parameters();
    for (const auto& item : model->named_parameters()) {
      const auto& a = item.value().grad();
      const auto& b = q[item.key()].grad();
      WCHECK(a.is_cuda() && torch::allclose(a, b, 1e-4, 1e-5),
             << item.key() << " " << (a - b).abs().max().item<double>());
    }
    opt.step();
    ref_opt.step();
  }
  for (const auto& p : model->parameters()) {
    WCHECK(torch::equal(kd::all_reduce(p.detach().clone(), kd::ReduceOp::kMax), p.detach()), << "replicas differ");
  }
  kd::finalize();
}

TEST(DdpOnCudaTest, GradientsMatchOneProcess_CUDA) {
  SKIP_WITHOUT_CUDA();
  run_ranks("cuda_ddp", "gloo", 2);
}

TEST(DdpOnCudaTest, NcclWorldSizeOne_CUDA) {
  SKIP_WITHOUT_NCCL();
  run_ranks("cuda_ddp", "nccl", 1);
}

using kindling::testing::ConvBn;

// SyncBatchNorm on the GPU: each rank's slice of the output equals one process's output on
// the whole batch, and so do the running statistics.
KINDLING_WORKER(cuda_sync_batchnorm) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int r = kd::get_rank(), n = kd::get_world_size();
  torch::manual_seed(9);
  auto model = kd::auto_model(std::make_shared<ConvBn>(), knn::DdpOptions().sync_batchnorm(true));
  torch::manual_seed(9);
  auto reference = std::make_shared<ConvBn>();
  reference->to(kd::device());
  WCHECK(model->bn->sync());
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(70 + step);
    auto x = (torch::randn({4 * n, 3, 6, 6}) * 2 + 0.5).to(kd::device());
    auto y = model(x.narrow(0, 4 * r, 4));
    auto y_ref = reference->forward(x).narrow(0, 4 * r, 4);
    WCHECK(y.is_cuda() && torch::allclose(y, y_ref, 1e-4, 1e-5), << (y - y_ref).abs().max().item<double>());
    y.sum().backward();
  }
  WCHECK(torch::allclose(model->bn->running_mean, reference->bn->running_mean, 1e-5, 1e-6));
  WCHECK(torch::allclose(model->bn->running_var, reference->bn->running_var, 1e-4, 1e-5));
  kd::finalize();
}

TEST(SyncBatchNormOnCudaTest, MatchesOneProcess_CUDA) {
  SKIP_WITHOUT_CUDA();
  run_ranks("cuda_sync_batchnorm", "gloo", 2);
}

class Squares : public kindling::data::Dataset {
 public:
  int64_t size() const override { return 37; }
  kindling::data::Example get(int64_t i) const override {
    return {at::full({2, 3}, static_cast<float>(i)), at::full({}, i * i, at::kLong)};
  }
};

// auto_dataloader with a CUDA device(): pinned batches, handed out on the GPU with the
// same values as a CPU loader's.
TEST(LoaderOnCudaTest, AutoDataloaderPinsAndDelivers_CUDA) {
  SKIP_WITHOUT_CUDA();
  auto data = std::make_shared<Squares>();
  auto options = kindling::data::DataLoaderOptions().batch_size(8).num_workers(2);
  auto loader = kd::auto_dataloader(data, options);
  kindling::data::DataLoader cpu_loader(data, kindling::data::DataLoaderOptions().batch_size(8).device(at::kCPU));
  auto expected = cpu_loader.begin();
  int64_t batches = 0;
  for (const auto& batch : loader) {
    EXPECT_EQ(batch.data.device(), kd::device());
    EXPECT_EQ(batch.target.device(), kd::device());
    EXPECT_TRUE(same(batch.data, expected->data)) << "batch " << batches;
    EXPECT_TRUE(same(batch.target, expected->target)) << "batch " << batches;
    ++expected;
    ++batches;
  }
  EXPECT_EQ(batches, 5);
  // Pinning itself, without the copy to the device.
  kindling::data::DataLoader pinned(data, kindling::data::DataLoaderOptions().batch_size(8).pin_memory(true));
  EXPECT_TRUE(pinned.begin()->data.is_pinned());
}

namespace ke = kindling::engine;
namespace kh = kindling::handlers;

// create_supervised_trainer with amp and a GradScaler on CUDA batches: the forward runs in
// float16, the loss goes down and the scale stays finite.
TEST(EngineOnCudaTest, AmpTrainerWithScaler_CUDA) {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(11);
  auto model = std::make_shared<Mlp>();
  model->to(at::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto scaler = std::make_shared<ke::GradScaler>();
  std::vector<at::ScalarType> output_types;
  auto mse = [](const at::Tensor& p, const at::Tensor& y) { return (p.to(at::kFloat) - y).pow(2).mean(); };
  ke::Engine trainer =
      ke::create_supervised_trainer(model, optimizer, mse,
                                    ke::SupervisedTrainerOptions()
                                        .device(c10::Device(c10::kCUDA))
                                        .amp(true)
                                        .scaler(scaler)
                                        .output_transform([&](const at::Tensor&, const at::Tensor&,
                                                              const at::Tensor& y_pred, const at::Tensor& loss) {
                                          output_types.push_back(y_pred.scalar_type());
                                          return ke::Value(loss.item<double>());
                                        }));
  const at::Tensor w = at::randn({20, 5}, kGpuFloat) * 0.3;
  std::vector<kindling::data::Example> data;
  for (int i = 0; i < 16; ++i) {
    const at::Tensor x = at::randn({32, 20}, kGpuFloat);
    data.push_back({x, at::mm(x, w)});
  }
  std::vector<double> losses;
  trainer.on(ke::Events::ITERATION_COMPLETED, [&](ke::Engine& e) { losses.push_back(e.state().output.number()); });
  trainer.run(data, 4);
  ASSERT_EQ(losses.size(), 64u);
  double first = 0, last = 0;
  for (int i = 0; i < 16; ++i) {
    first += losses[i] / 16;
    last += losses[48 + i] / 16;
  }
  EXPECT_LT(last, first * 0.5) << "mean loss of epoch 1 " << first << ", of epoch 4 " << last;
  ASSERT_FALSE(output_types.empty());
  for (auto t : output_types) EXPECT_EQ(t, at::kHalf) << "the forward ran under CUDA autocast";
  EXPECT_TRUE(std::isfinite(scaler->get_scale()) && scaler->get_scale() > 0) << scaler->get_scale();
  for (const auto& p : model->parameters()) {
    EXPECT_TRUE(p.is_cuda() && p.scalar_type() == at::kFloat) << p.device() << " " << p.scalar_type();
    EXPECT_TRUE(at::isfinite(p).all().item<bool>());
  }
  EXPECT_EQ(at::mm(w.t(), w).scalar_type(), at::kFloat) << "autocast is off again after the run";
}

// create_supervised_evaluator with Accuracy and Loss on CUDA tensors (accumulators on the
// GPU and on the CPU) gives what the same evaluator gives on CPU copies.
TEST(EngineOnCudaTest, EvaluatorMetricsMatchCpu_CUDA) {
  SKIP_WITHOUT_CUDA();
  at::manual_seed(12);
  auto cpu_model = std::make_shared<Mlp>();
  at::manual_seed(12);
  auto gpu_model = std::make_shared<Mlp>();
  gpu_model->to(at::kCUDA);
  std::vector<kindling::data::Example> cpu_data, gpu_data;
  for (int i = 0; i < 7; ++i) {
    const at::Tensor x = at::randn({13, 20}), y = at::randint(0, 5, {13}, at::kLong);
    cpu_data.push_back({x, y});
    gpu_data.push_back({x.to(at::kCUDA), y.to(at::kCUDA)});
  }
  auto ce = [](const at::Tensor& p, const at::Tensor& y) { return at::cross_entropy_loss(p, y); };
  const c10::Device cuda(c10::kCUDA);
  namespace km = kindling::metrics;
  ke::Engine cpu_eval = ke::create_supervised_evaluator(
      cpu_model, {{"accuracy", std::make_shared<km::Accuracy>()}, {"loss", std::make_shared<km::Loss>(ce)}});
  ke::Engine gpu_eval = ke::create_supervised_evaluator(
      gpu_model, {{"accuracy", std::make_shared<km::Accuracy>(km::OutputTransform(), false, cuda)},
                  {"loss", std::make_shared<km::Loss>(ce, km::OutputTransform(), km::Loss::BatchSize(), cuda)},
                  {"accuracy_cpu", std::make_shared<km::Accuracy>()},
                  {"loss_cpu", std::make_shared<km::Loss>(ce)}});
  std::vector<bool> on_gpu;
  gpu_eval.on(ke::Events::ITERATION_COMPLETED,
              [&](ke::Engine& e) { on_gpu.push_back(e.state().output[std::size_t{0}].is_cuda()); });
  cpu_eval.run(cpu_data, 1);
  gpu_eval.run(gpu_data, 1);
  ASSERT_EQ(on_gpu.size(), 7u);
  for (bool b : on_gpu) EXPECT_TRUE(b) << "y_pred on the GPU";
  const auto& want = cpu_eval.state().metrics;
  const auto& got = gpu_eval.state().metrics;
  const double acc = want.at("accuracy").number(), loss = want.at("loss").number();
  EXPECT_GT(loss, 0);
  EXPECT_DOUBLE_EQ(got.at("accuracy").number(), acc);
  EXPECT_DOUBLE_EQ(got.at("accuracy_cpu").number(), acc);
  EXPECT_NEAR(got.at("loss").number(), loss, 1e-5 * loss);
  EXPECT_NEAR(got.at("loss_cpu").number(), loss, 1e-5 * loss);
}

// Checkpoint of a CUDA model and its optimizer: load_objects into a fresh CUDA model gives
// the same weights (still on the GPU), and the next step of both is the same.
TEST(CheckpointOnCudaTest, RoundTripsACudaModel_CUDA) {
  SKIP_WITHOUT_CUDA();
  char pattern[] = "/tmp/kindling-cuda-ckpt-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  at::manual_seed(13);
  auto model = std::make_shared<Mlp>();
  model->to(at::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const at::Tensor x = at::randn({8, 20}, kGpuFloat), y = at::randn({8, 5}, kGpuFloat);
  auto step = [&](std::shared_ptr<Mlp>& m, torch::optim::SGD& opt) {
    opt.zero_grad();
    torch::mse_loss(m->forward(x), y).backward();
    opt.step();
  };
  step(model, optimizer);
  auto checkpoint = std::make_shared<kh::Checkpoint>(
      kh::Objects{{"model", kh::stateful(model)}, {"optimizer", kh::stateful(optimizer)}},
      std::make_shared<kh::DiskSaver>(dir), kh::CheckpointOptions().filename_prefix("gpu"));
  ke::Engine engine([](ke::Engine&, const int& b) -> ke::Value { return b; });
  checkpoint->attach(engine, ke::Events::COMPLETED);
  std::vector<int> once{1};
  engine.run(once);
  ASSERT_TRUE(checkpoint->last_checkpoint().has_value());

  at::manual_seed(14);
  auto fresh = std::make_shared<Mlp>();
  fresh->to(at::kCUDA);
  torch::optim::SGD fresh_optimizer(fresh->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_FALSE(same(fresh->fc1->weight, model->fc1->weight));
  kh::Checkpoint::load_objects({{"model", kh::stateful(fresh)}, {"optimizer", kh::stateful(fresh_optimizer)}},
                               *checkpoint->last_checkpoint());
  auto want = model->named_parameters();
  for (const auto& item : fresh->named_parameters()) {
    EXPECT_TRUE(item.value().is_cuda()) << item.key() << " " << item.value().device();
    EXPECT_TRUE(same(item.value(), want[item.key()])) << item.key();
  }
  step(model, optimizer);
  step(fresh, fresh_optimizer);  // with the loaded momentum buffers
  for (const auto& item : fresh->named_parameters()) {
    EXPECT_TRUE(same(item.value(), want[item.key()])) << item.key() << " after one more step";
  }
}

// common.empty_cuda_cache: the blocks the caching allocator kept after a tensor died go back to
// the driver (LibTorch 2.x); LibTorch 1.x refuses with what to call instead.
TEST(HandlersOnCudaTest, EmptyCudaCacheReturnsTheCachedBlocks_CUDA) {
  SKIP_WITHOUT_CUDA();
  ke::Engine engine([](ke::Engine&, const int& b) -> ke::Value { return b; });
#if __has_include(<c10/core/CachingDeviceAllocator.h>)
  auto reserved = [] {
    const auto stats = c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(0);
    return stats.reserved_bytes[static_cast<std::size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)].current;
  };
  { const at::Tensor big = at::empty({64 << 20}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA)); }
  ASSERT_GE(reserved(), int64_t{64} << 20) << "the allocator keeps the freed block cached";
  kh::empty_cuda_cache(engine);
  EXPECT_LT(reserved(), int64_t{64} << 20);
#else
  EXPECT_THROW(kh::empty_cuda_cache(engine), kindling::UsageError);
#endif
}

}  // namespace
