// Exact resume: a training run stopped at any iteration and resumed in fresh objects from
// the saved engine, model, optimizer and RNG states sees the same batches (with the same
// random augmentations) and ends with bitwise the same weights as the uninterrupted run.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <random>
#include <sstream>
#include <vector>

#include "kindling/data/loader.h"
#include "kindling/engine/engine.h"
#include "kindling/engine/supervised.h"

namespace {

using kindling::data::DataLoader;
using kindling::data::DataLoaderOptions;
using kindling::data::Example;
using kindling::engine::Engine;
using kindling::engine::Events;

// 50 samples of 6 features with a random augmentation drawn from sample_rng(): the loader
// seeds it per (seed, epoch, index), so a batch's values depend on where it is drawn.
class NoisyDataset : public kindling::data::Dataset {
 public:
  int64_t size() const override { return 50; }
  Example get(int64_t index) const override {
    std::normal_distribution<float> noise(0.0f, 0.1f);
    at::Tensor x = at::arange(6, at::kFloat) * static_cast<float>(index % 7) / 10.0f;
    for (int64_t i = 0; i < 6; ++i) x[i] += noise(kindling::data::sample_rng());
    return {x, at::scalar_tensor(index % 3, at::kLong)};
  }
};

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 16));
    drop = register_module("drop", torch::nn::Dropout(0.3));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(drop(at::relu(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

constexpr int64_t kEpochs = 3;
constexpr int64_t kBatchesPerEpoch = 7;  // 50 samples, batch 8 (the last one has 2)

struct Run {
  std::vector<double> batch_sums;  // one per iteration processed in this run
  std::vector<at::Tensor> weights;
};

// Everything one run needs, made fresh (as a resumed process would).
struct Training {
  Net model;
  torch::optim::SGD optimizer;
  DataLoader loader;
  Engine trainer;
  Run run;

  Training()
      : model(make_model()),
        optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)),
        loader(std::make_shared<NoisyDataset>(),
               DataLoaderOptions().batch_size(8).shuffle(true).num_workers(2).seed(7)),
        trainer(kindling::engine::create_supervised_trainer(
            model, optimizer, [](const at::Tensor& p, const at::Tensor& y) { return at::cross_entropy_loss(p, y); })) {
    trainer.on(Events::ITERATION_STARTED, [this](Engine& e) {
      run.batch_sums.push_back(e.state().batch_as<Example>().data.sum().item<double>());
    });
  }
  static Net make_model() {
    at::manual_seed(1);
    return Net();
  }
  void finish() {
    for (const auto& p : model->parameters()) run.weights.push_back(p.detach().clone());
  }
};

struct Saved {
  kindling::StateDict engine = kindling::new_state_dict();
  std::string model, optimizer;
  at::Tensor rng;
};

Saved save(Training& t) {
  Saved s;
  s.engine = t.trainer.state_dict();
  std::ostringstream m, o;
  torch::save(t.model, m);
  torch::save(t.optimizer, o);
  s.model = m.str();
  s.optimizer = o.str();
  s.rng = at::detail::getDefaultCPUGenerator().get_state();
  return s;
}

void load(Training& t, const Saved& s) {
  std::istringstream m(s.model), o(s.optimizer);
  torch::load(t.model, m);
  torch::load(t.optimizer, o);
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  cpu.set_state(s.rng);
  t.trainer.load_state_dict(s.engine);
}

Run uninterrupted() {
  Training t;
  at::manual_seed(99);  // dropout's generator
  t.trainer.run(t.loader, kEpochs);
  t.finish();
  return t.run;
}

void expect_resume_is_exact(int64_t stop_at) {
  const Run reference = uninterrupted();
  ASSERT_EQ(reference.batch_sums.size(), static_cast<std::size_t>(kEpochs * kBatchesPerEpoch));

  Saved saved;
  std::vector<double> first_part;
  {
    Training t;
    at::manual_seed(99);
    t.trainer.on(Events::ITERATION_COMPLETED.once(stop_at), [&](Engine& e) {
      saved = save(t);
      e.terminate();
    });
    t.trainer.run(t.loader, kEpochs);
    first_part = t.run.batch_sums;
  }
  ASSERT_EQ(first_part.size(), static_cast<std::size_t>(stop_at));
  at::manual_seed(12345);  // the resumed process starts with other RNG state: the load must restore it
  Training resumed;
  load(resumed, saved);
  resumed.trainer.run(resumed.loader, kEpochs);
  resumed.finish();

  std::vector<double> sums = first_part;
  sums.insert(sums.end(), resumed.run.batch_sums.begin(), resumed.run.batch_sums.end());
  ASSERT_EQ(sums.size(), reference.batch_sums.size()) << "stopped at " << stop_at;
  for (std::size_t i = 0; i < sums.size(); ++i) {
    EXPECT_EQ(sums[i], reference.batch_sums[i]) << "batch of iteration " << i + 1 << ", stopped at " << stop_at;
  }
  ASSERT_EQ(resumed.run.weights.size(), reference.weights.size());
  for (std::size_t i = 0; i < reference.weights.size(); ++i) {
    EXPECT_TRUE(at::equal(resumed.run.weights[i], reference.weights[i]))
        << "parameter " << i << " differs after resuming at iteration " << stop_at;
  }
  EXPECT_EQ(resumed.trainer.state().iteration, kEpochs * kBatchesPerEpoch);
  EXPECT_EQ(resumed.trainer.state().epoch, kEpochs);
}

TEST(ExactResumeTest, AfterTheFirstIteration) { expect_resume_is_exact(1); }
TEST(ExactResumeTest, MidEpoch) { expect_resume_is_exact(kBatchesPerEpoch + 3); }
TEST(ExactResumeTest, AtAnEpochBoundary) { expect_resume_is_exact(2 * kBatchesPerEpoch); }
TEST(ExactResumeTest, BeforeTheLastIteration) { expect_resume_is_exact(kEpochs * kBatchesPerEpoch - 1); }

TEST(ExactResumeTest, LoaderBeginAtSkipsWithoutLoading) {
  // A dataset that counts its loads: begin_at(k) must not load the first k batches.
  struct Counting : kindling::data::Dataset {
    mutable std::atomic<int> loads{0};
    int64_t size() const override { return 40; }
    Example get(int64_t i) const override {
      ++loads;
      return {at::full({2}, static_cast<float>(i)), at::scalar_tensor(0, at::kLong)};
    }
  };
  auto ds = std::make_shared<Counting>();
  DataLoader loader(ds, DataLoaderOptions().batch_size(4).shuffle(true).seed(3));
  loader.set_epoch(2);
  std::vector<double> full;
  for (const auto& b : loader) full.push_back(b.data.sum().item<double>());
  ds->loads = 0;
  loader.set_epoch(2);
  std::vector<double> tail;
  for (auto it = loader.begin_at(6); it != loader.end(); ++it) tail.push_back(it->data.sum().item<double>());
  EXPECT_EQ(ds->loads.load(), 16);  // batches 6..9 only
  EXPECT_EQ(tail, std::vector<double>(full.begin() + 6, full.end()));
  EXPECT_TRUE(loader.begin_at(10) == loader.end());
  EXPECT_THROW(loader.begin_at(-1), kindling::UsageError);
}

}  // namespace
