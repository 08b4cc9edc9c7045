#pragma once
// Small modules shared by tests of several areas.
#include <kindling/nn/batchnorm.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

/// The MLP of the Python references (tests/python/powersgd_reference.py: model()), 12 -> 24 -> 24
/// -> 3 with tanh, its weights a closed formula, so that C++ and Python start alike.
inline torch::nn::Sequential reference_mlp() {
  torch::nn::Sequential net(torch::nn::Linear(12, 24), torch::nn::Tanh(), torch::nn::Linear(24, 24), torch::nn::Tanh(),
                            torch::nn::Linear(24, 3));
  torch::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : net->parameters()) {
    auto i = torch::arange(p.numel(), torch::kDouble);
    p.copy_((0.3 * torch::sin(i * 1.7 + 0.9 * k)).to(torch::kFloat).view(p.sizes()));
    ++k;
  }
  return net;
}

/// Rank `rank`'s 4 rows of step `step` for reference_mlp(), as the Python references' batch().
inline std::pair<torch::Tensor, torch::Tensor> reference_batch(int rank, int step) {
  constexpr int kRows = 4;
  auto rows = torch::arange(kRows, torch::kDouble) + rank * kRows + 100 * step;
  auto x = torch::sin(rows.unsqueeze(1) * 0.37 + torch::arange(12, torch::kDouble).unsqueeze(0) * 0.11);
  auto y = torch::cos(rows.unsqueeze(1) * 0.23 + torch::arange(3, torch::kDouble).unsqueeze(0) * 0.5);
  return {x.to(torch::kFloat), y.to(torch::kFloat)};
}

/// A Python reference's output: lines "a b c v0 v1 ..." (three words naming the tensor: config,
/// step or worker, parameter name), read as "a b c" -> the values.
inline std::map<std::string, std::vector<float>> read_reference_values(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string a, b, c;
    fields >> a >> b >> c;
    auto& values = out[a + " " + b + " " + c];
    float v;
    while (fields >> v) values.push_back(v);
  }
  return out;
}

}  // namespace testing
}  // namespace kindling
