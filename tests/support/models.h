#pragma once
// Small modules shared by tests of several areas.
#include <kindling/nn/batchnorm.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace kindling {
namespace testing {

/// A 3x3 convolution (3 -> 4 channels, no bias) followed by kindling's BatchNorm2d(4): the
/// smallest model whose BatchNorm auto_model can make synchronized.
struct ConvBn : torch::nn::Module {
  ConvBn() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).bias(false)));
    bn = register_module("bn", kindling::nn::BatchNorm2d(4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn(conv(x)); }
  torch::nn::Conv2d conv{nullptr};
  kindling::nn::BatchNorm2d bn{nullptr};
};

/// Three Linear layers, tanh between: in -> hidden -> hidden -> out (default 12 -> 32 -> 32 -> 4),
/// the small model of the DDP optimizer tests.
struct Mlp3Impl : torch::nn::Module {
  explicit Mlp3Impl(int64_t in = 12, int64_t hidden = 32, int64_t out = 4) {
    a = register_module("a", torch::nn::Linear(in, hidden));
    b = register_module("b", torch::nn::Linear(hidden, hidden));
    c = register_module("c", torch::nn::Linear(hidden, out));
  }
  torch::Tensor forward(torch::Tensor x) { return c(torch::tanh(b(torch::tanh(a(x))))); }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};
TORCH_MODULE(Mlp3);

}  // namespace testing
}  // namespace kindling
