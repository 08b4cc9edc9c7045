#pragma once
// Small modules shared by tests of several areas.
#include <kindling/nn/batchnorm.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>

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

}  // namespace testing
}  // namespace kindling
