#pragma once
// What the GPU tests share (cuda_test.cpp, comm_hooks_cuda_test.cpp): the skip rules, the
// multi-rank runner and the small MLP.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <kindling/config.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <chrono>
#include <string>

#include "support/multiprocess.h"

#define SKIP_WITHOUT_CUDA() \
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: this LibTorch has no CUDA or sees no GPU"

#define SKIP_WITHOUT_NCCL() \
  SKIP_WITHOUT_CUDA();      \
  if (!KINDLING_HAS_NCCL) GTEST_SKIP() << "kindling was built without nccl (KINDLING_WITH_NCCL=OFF)"

namespace kindling {
namespace testing {

/// Runs `worker` on `world_size` ranks of `backend` and expects every rank to succeed.
inline void run_ranks(const std::string& worker, const std::string& backend, int world_size) {
  kindling::testing::LaunchOptions opts;
  opts.backend = backend;
  opts.world_size = world_size;
  opts.deadline = std::chrono::seconds(180);
  auto results = kindling::testing::run_workers(worker, opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
}

/// A two-layer MLP (20 -> 64 -> 5) for the GPU tests.
struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(20, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

}  // namespace testing
}  // namespace kindling
