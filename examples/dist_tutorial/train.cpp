// train: distributed synchronous SGD.
#include <torch/torch.h>

#include <kindling/dist/auto.h>
#include <kindling/kindling.h>
#include <kindling/data/loader.h>
#include <kindling/nn/ddp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model.h"
#include "tutorial.h"

namespace kd = kindling::dist;
namespace kdata = kindling::data;

namespace dist_tutorial {

namespace {

/// The tutorial's average_gradients: sum every gradient over the ranks, divide by their
/// number. All ranks then take the same optimizer step and stay identical. Every rank must
/// call it after backward(), with the same model.
void average_gradients(torch::nn::Module& model) {
  const double size = kd::get_world_size();
  for (const auto& parameter : model.parameters()) {
    torch::Tensor grad = parameter.grad();  // shares the gradient's storage
    if (!grad.defined()) continue;          // unused parameter: no rank has a gradient
    kd::all_reduce(grad, kd::ReduceOp::kSum);
    grad.div_(size);
  }
}

/// Fails on every rank unless all ranks hold bit-identical parameters: the elementwise
/// maximum and minimum over the ranks must agree. Every rank must call it.
void check_replicas_identical(torch::nn::Module& model) {
  std::vector<torch::Tensor> pieces;
  for (const auto& parameter : model.parameters()) pieces.push_back(parameter.detach().reshape({-1}));
  const torch::Tensor mine = torch::cat(pieces);
  const torch::Tensor high = kd::all_reduce(mine.clone(), kd::ReduceOp::kMax);
  const torch::Tensor low = kd::all_reduce(mine.clone(), kd::ReduceOp::kMin);
  KINDLING_CHECK_T(kindling::Error, torch::equal(high, low),
                   "dist_tutorial train: the model parameters differ across ranks after training (largest spread ",
                   (high - low).abs().max().item<double>(), " over ", mine.numel(),
                   " values); the gradient averaging did not keep the replicas in sync");
  if (kd::get_rank() == 0) {
    say("parameters identical on all ", kd::get_world_size(), " ranks (", mine.numel(), " values checked)");
  }
}

}  // namespace

void run_train(const Options& o) {
  const int rank = kd::get_rank();
  const int size = kd::get_world_size();
  const torch::Device device = kd::device();
  section("train: synchronous SGD with gradient averaging on Fashion-MNIST");

  // Rank 0 also opens the test set now, so a missing file is reported before any
  // training time is spent.
  const auto train = fashion_mnist(o.data_dir, /*train=*/true, o.limit);
  std::shared_ptr<const kdata::Dataset> test;
  if (rank == 0) test = fashion_mnist(o.data_dir, /*train=*/false, -1);
  KINDLING_CHECK(train->size() >= size, "dist_tutorial train: ", train->size(),
                 " training samples cannot be split across ", size, " ranks; raise --limit to at least ", size);

  // The same seed on every rank gives every replica the same initial weights; then each
  // rank draws its own dropout masks, as it sees its own data.
  torch::manual_seed(o.seed);
  Net model;
  model->to(device);
  // The global batch is 128 samples in both variants.
  std::optional<kindling::nn::DistributedDataParallel<NetImpl>> ddp;
  std::optional<kdata::DataLoader> loader;
  if (o.sync == "ddp") {
    // auto_model wraps the model in kindling's DistributedDataParallel: backward() then
    // returns with gradients already averaged over the ranks. auto_dataloader gives each
    // rank 128 / size samples per batch from a DistributedSampler, loaded by worker threads.
    ddp = kd::auto_model(model);
    loader = kd::auto_dataloader(train,
                                 kdata::DataLoaderOptions().batch_size(128).shuffle(true).seed(o.seed).num_workers(2));
  } else {
    // The tutorial's way: a fixed part of the data per rank (DataPartitioner), shuffled
    // within the rank each epoch, batch 128 / size.
    auto part = partition_indices(train->size(), size, rank, /*seed=*/1234);
    loader = kdata::DataLoader(train, kdata::DataLoaderOptions()
                                          .batch_size(std::max(1, 128 / size))
                                          .sampler(std::make_shared<kdata::SubsetRandomSampler>(
                                              std::move(part), o.seed + static_cast<uint64_t>(rank)))
                                          .num_workers(2));
  }
  torch::manual_seed(o.seed + 1 + static_cast<uint64_t>(rank));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  if (rank == 0) {
    say(size, " rank(s) x ", loader->sampler()->size(), " samples, batch size ", loader->options().batch_size(),
        " per rank, ", loader->size(), " steps per epoch, ", o.epochs, " epoch(s), gradients averaged by ",
        ddp ? "DistributedDataParallel (auto_model), data from auto_dataloader" : "average_gradients");
  }

  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    model->train();
    loader->set_epoch(epoch);  // a new shuffle each epoch
    double epoch_loss = 0.0;
    for (const auto& batch : *loader) {
      const torch::Tensor data = batch.data.to(device);
      const torch::Tensor target = batch.target.to(device);
      optimizer.zero_grad();
      const torch::Tensor loss = torch::nll_loss(ddp ? ddp->forward(data) : model->forward(data), target);
      epoch_loss += loss.item<double>();
      loss.backward();
      if (!ddp) average_gradients(*model);
      optimizer.step();
    }
    say("Rank ", rank, ", epoch ", epoch, ": loss ", fixed(epoch_loss / static_cast<double>(loader->size()), 4));
  }

  check_replicas_identical(*model);
  if (rank == 0) say("test accuracy ", fixed(100.0 * accuracy(*model, test, device), 2), "%");
  kd::barrier();  // the others wait while rank 0 evaluates, so nobody leaves the job early
}

}  // namespace dist_tutorial
