#pragma once
// The training step that bench_ddp and bench_reducer time: the model (mlp: 784-1024-1024-10 by
// default, wider and deeper on request;
// resnet18: kindling's ResNet18 with 1 input channel and 10 classes on 28x28), Fashion-MNIST
// held in memory and normalized, and the batch a step takes (rank r's step s starts at sample
// (s * world + r) * batch), so every implementation sees the same data.
#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <kindling/data/datasets.h>
#include <kindling/models/resnet.h>

#include <string>
#include <utility>

namespace bench {

/// The two models, initialized from seed 0 (the same weights on every rank and for every
/// implementation). The MLP: Flatten, then `depth` hidden layers of `width` (Linear, ReLU), then
/// Linear(width, 10); the defaults are the 784-1024-1024-10 model.
inline torch::nn::Sequential make_mlp(int64_t width = 1024, int depth = 2) {
  at::manual_seed(0);
  auto net = torch::nn::Sequential(torch::nn::Flatten());
  for (int i = 0; i < depth; ++i) {
    net->push_back(torch::nn::Linear(i == 0 ? 784 : width, width));
    net->push_back(torch::nn::ReLU());
  }
  net->push_back(torch::nn::Linear(width, 10));
  return net;
}
inline kindling::models::ResNet make_resnet18() {
  at::manual_seed(0);
  return kindling::models::resnet18(kindling::models::ResNetOptions().num_classes(10).in_channels(1));
}

/// Calls `f` with a fresh model named `model` ("mlp", of `width` x `depth`, or "resnet18").
template <class F>
void with_model(const std::string& model, F&& f, int64_t width = 1024, int depth = 2) {
  if (model == "mlp") {
    f(make_mlp(width, depth));
  } else {
    f(make_resnet18());
  }
}

/// Fashion-MNIST's training images as normalized floats [N, 1, 28, 28], and the labels.
inline std::pair<at::Tensor, at::Tensor> training_data(const std::string& dir) {
  kindling::data::FashionMNIST train_set(dir, true);
  return {(train_set.images().to(at::kFloat) / 255.0 - 0.2860) / 0.3530, train_set.targets()};
}

/// The rows rank `rank` of `world` trains on at step `step`.
inline std::pair<at::Tensor, at::Tensor> step_batch(const std::pair<at::Tensor, at::Tensor>& data, int64_t step,
                                                    int rank, int world, int64_t batch) {
  const int64_t n = data.first.size(0);
  const int64_t start = ((step * world + rank) * batch) % (n - batch);
  return {data.first.narrow(0, start, batch), data.second.narrow(0, start, batch)};
}

}  // namespace bench
