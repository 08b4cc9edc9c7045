// train's model and data; see model.h.
#include "model.h"

#include <kindling/data/datasets.h>
#include <kindling/data/loader.h>
#include <kindling/data/transforms.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace kdata = kindling::data;

namespace dist_tutorial {

namespace {

/// Fashion-MNIST's training-pixel mean and standard deviation (after scaling to [0, 1]).
constexpr double kFashionMnistMean = 0.2860;
constexpr double kFashionMnistStd = 0.3530;

}  // namespace

std::vector<int64_t> partition_indices(int64_t n, int parts, int part, uint32_t seed) {
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t length = n / parts;
  return std::vector<int64_t>(order.begin() + part * length, order.begin() + (part + 1) * length);
}

std::shared_ptr<const kdata::Dataset> fashion_mnist(const std::string& dir, bool train, int64_t limit) {
  auto raw = kdata::Subset::first(std::make_shared<kdata::FashionMNIST>(dir, train), limit);
  return std::make_shared<kdata::TransformedDataset>(
      raw, kdata::transforms::Compose(
               {kdata::transforms::ToTensor(), kdata::transforms::Normalize({kFashionMnistMean}, {kFashionMnistStd})}));
}

double accuracy(NetImpl& model, std::shared_ptr<const kdata::Dataset> split, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model.eval();
  kdata::DataLoader loader(split, kdata::DataLoaderOptions().batch_size(1000).num_workers(2));
  int64_t correct = 0;
  for (const auto& batch : loader) {
    const torch::Tensor output = model.forward(batch.data.to(device));
    correct += output.argmax(1).eq(batch.target.to(device)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(split->size());
}

}  // namespace dist_tutorial
