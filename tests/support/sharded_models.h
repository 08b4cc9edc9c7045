#pragma once
// Small models and data of the sharded data-parallel tests (tests/nn/sharding*_test.cpp): one
// with Units and a root unit, and Sequentials, whose children are units.
#include <kindling/dist/dist.h>
#include <kindling/nn/unit.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace kindling {
namespace testing {

/// A Linear layer and tanh.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t in, int64_t out) { fc = register_module("fc", torch::nn::Linear(in, out)); }
  torch::Tensor forward(torch::Tensor x) { return torch::tanh(fc(x)); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Block);

/// Two Units (12 -> 32 -> 31) and a head (31 -> 4) in no unit: the root unit.
struct UnitNetImpl : torch::nn::Module {
  UnitNetImpl() {
    b1 = register_module("b1", kindling::nn::Unit<BlockImpl>(Block(12, 32)));
    b2 = register_module("b2", kindling::nn::Unit<BlockImpl>(Block(32, 31)));
    head = register_module("head", torch::nn::Linear(31, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return head(b2(b1(x))); }
  kindling::nn::Unit<BlockImpl> b1{nullptr}, b2{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(UnitNet);

/// Linear layers of the given widths with tanh between them, as a Sequential.
inline torch::nn::Sequential sequential_mlp(const std::vector<int64_t>& widths) {
  torch::nn::Sequential seq;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) seq->push_back(torch::nn::Tanh());
    seq->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
  }
  return seq;
}

/// One step's (input, target) on this rank, 6 rows of `in` and 4 columns.
inline std::pair<torch::Tensor, torch::Tensor> sharding_batch(int step, int64_t in = 12) {
  torch::manual_seed(1000 + 10 * step + kindling::dist::get_rank());
  return {torch::randn({6, in}), torch::randn({6, 4})};
}

}  // namespace testing
}  // namespace kindling
