// GPU tests of DDP's communication hooks (names end in _CUDA; skipped with the reason where
// LibTorch sees no CUDA device): fp16 / bf16 and PowerSGD on CUDA tensors, gloo at 2 ranks on
// one GPU and nccl at 1.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <kindling/dist/dist.h>
#include <kindling/kindling.h>
#include <kindling/nn/comm_hook.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/powersgd.h>
#include <torch/nn/functional/loss.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_support.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace knn = kindling::nn;
using kindling::testing::Mlp;
using kindling::testing::run_ranks;

namespace {

// One backward of a fresh Mlp (seed 3) on `device`, wrapped in DDP with `hook` (none: plain
// local gradients of rows `rank`); the gradients by name, on the CPU.
std::map<std::string, at::Tensor> cuda_hook_gradients(const std::shared_ptr<knn::CommHook>& hook, at::Device device,
                                                      int rank, const at::Tensor& x, const at::Tensor& y) {
  torch::manual_seed(3);
  auto module = std::make_shared<Mlp>();
  module->to(device);
  const auto xs = x.narrow(0, 8 * rank, 8).to(device), ys = y.narrow(0, 8 * rank, 8).to(device);
  if (hook) {
    knn::DistributedDataParallel<Mlp> model(
        module,
        std::make_shared<knn::GradientReducer>(*module, knn::DdpOptions().bucket_cap_mb(0.002).comm_hook(hook)));
    torch::mse_loss(model(xs), ys).backward();
  } else {
    torch::mse_loss(module->forward(xs), ys).backward();
  }
  std::map<std::string, at::Tensor> out;
  for (const auto& item : module->named_parameters()) out[item.key()] = item.value().grad().cpu();
  return out;
}

// Communication hooks on the GPU. fp16 / bf16: every rank's gradient (computed here), cast,
// divided and summed in the dtype (one rounding for up to 2 ranks), equals the hook's result.
// PowerSGD of full rank without a minimum rate reconstructs the average (P spans the average's
// columns, so P P^T M = M); of rank 1 it is the average projected onto one direction.
KINDLING_WORKER(cuda_comm_hooks) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int r = kd::get_rank(), n = kd::get_world_size();
  torch::manual_seed(7);
  const auto x = torch::randn({8 * n, 20}), y = torch::randn({8 * n, 5});
  std::vector<std::map<std::string, at::Tensor>> local;
  for (int q = 0; q < n; ++q) local.push_back(cuda_hook_gradients(nullptr, kd::device(), q, x, y));
  const std::vector<std::pair<std::shared_ptr<knn::CommHook>, at::ScalarType>> casts = {
      {knn::fp16_compress_hook(), at::kHalf}, {knn::bf16_compress_hook(), at::kBFloat16}};
  for (const auto& [hook, dtype] : casts) {
    for (const auto& [key, got] : cuda_hook_gradients(hook, kd::device(), r, x, y)) {
      at::Tensor sum = at::zeros_like(got, dtype);
      for (int q = 0; q < n; ++q) sum += local[q].at(key).to(dtype) / n;
      WCHECK(torch::equal(got, sum.to(at::kFloat)),
             << hook->name() << " " << key << ": max difference " << (got - sum.to(at::kFloat)).abs().max());
    }
  }
  auto full = knn::powerSGD_hook(
      knn::PowerSgdOptions().matrix_approximation_rank(64).min_compression_rate(0).start_powerSGD_iter(0));
  for (const auto& [key, got] : cuda_hook_gradients(full, kd::device(), r, x, y)) {
    at::Tensor mean = at::zeros_like(got);
    for (int q = 0; q < n; ++q) mean += local[q].at(key) / n;
    WCHECK(torch::allclose(got, mean, 1e-3, 1e-5), << "powerSGD " << key << ": " << (got - mean).abs().max());
  }
  WCHECK(full->compression_stats().numel_after > 0, << "nothing was compressed");
  // Rank 1: each compressed matrix is the average projected onto one direction u (P P^T M with
  // P = u, u spanning the result's own columns); biases (not compressed) are the average.
  auto one = knn::powerSGD_hook(knn::PowerSgdOptions().start_powerSGD_iter(0));
  for (const auto& [key, got] : cuda_hook_gradients(one, kd::device(), r, x, y)) {
    at::Tensor mean = at::zeros_like(got);
    for (int q = 0; q < n; ++q) mean += local[q].at(key) / n;
    if (got.dim() == 1) {
      WCHECK(torch::allclose(got, mean, 1e-5, 1e-7), << "powerSGD rank 1, " << key << ": " << (got - mean).abs().max());
      continue;
    }
    const auto column = got.select(1, got.norm(2, {0}).argmax().item<int64_t>());
    const auto u = column / column.norm();
    const auto projected = at::outer(u, mean.t().matmul(u));
    WCHECK(torch::allclose(got, projected, 1e-3, 1e-5),
           << "powerSGD rank 1, " << key << ": " << (got - projected).abs().max());
    WCHECK(!torch::allclose(got, mean, 1e-2, 1e-4), << "powerSGD rank 1, " << key << ": nothing was approximated");
  }
  kd::finalize();
}

TEST(CommHooksOnCudaTest, GlooTwoRanks_CUDA) {
  SKIP_WITHOUT_CUDA();
  run_ranks("cuda_comm_hooks", "gloo", 2);
}

TEST(CommHooksOnCudaTest, NcclWorldSizeOne_CUDA) {
  SKIP_WITHOUT_NCCL();
  run_ranks("cuda_comm_hooks", "nccl", 1);
}

}  // namespace
