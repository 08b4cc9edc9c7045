#pragma once
// train's model and data: the tutorial's network, its partition of the data, Fashion-MNIST
// as normalized float tensors, and the test accuracy.
#include <torch/torch.h>

#include <kindling/data/dataset.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dist_tutorial {

/// The tutorial's network (PyTorch's classic MNIST example): two convolutions, dropout,
/// two fully connected layers, log-probabilities out.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1_(torch::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)),
        conv2_(torch::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)),
        fc1_(320, 50),
        fc2_(50, 10) {
    register_module("conv1", conv1_);
    register_module("conv2", conv2_);
    register_module("conv2_drop", conv2_drop_);
    register_module("fc1", fc1_);
    register_module("fc2", fc2_);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1_->forward(x), 2));                        // [n, 10, 12, 12]
    x = torch::relu(torch::max_pool2d(conv2_drop_->forward(conv2_->forward(x)), 2));  // [n, 20, 4, 4]
    x = x.view({-1, 320});
    x = torch::relu(fc1_->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*train=*/is_training());
    return torch::log_softmax(fc2_->forward(x), /*dim=*/1);
  }

  torch::nn::Conv2d conv1_;
  torch::nn::Conv2d conv2_;
  torch::nn::Dropout2d conv2_drop_;
  torch::nn::Linear fc1_;
  torch::nn::Linear fc2_;
};
TORCH_MODULE(Net);

/// The tutorial's DataPartitioner for equal fractions: shuffles 0..n-1 with std::mt19937
/// seeded with `seed` (the same on every rank, so the parts are disjoint) and returns the
/// `part`-th of `parts` consecutive slices of n / parts indices (the remainder is dropped,
/// so every rank gets the same number of samples and runs the same number of steps).
std::vector<int64_t> partition_indices(int64_t n, int parts, int part, uint32_t seed);

/// A Fashion-MNIST split as float tensors: ToTensor then Normalize, applied per sample.
std::shared_ptr<const kindling::data::Dataset> fashion_mnist(const std::string& dir, bool train, int64_t limit);

/// Fraction of `split` that `model` classifies correctly.
double accuracy(NetImpl& model, std::shared_ptr<const kindling::data::Dataset> split, const torch::Device& device);

}  // namespace dist_tutorial
