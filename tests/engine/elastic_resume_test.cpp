// Resuming at another world size (elastic restarts): a job of 3 ranks checkpoints mid-epoch and
// stops; a job of 2 ranks resumes from the checkpoint with the user's two-line pattern. Every
// sample of every epoch is trained on exactly once across the change, and the final weights
// equal an uninterrupted 2-rank run's.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kindling/dist/auto.h"
#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/engine/supervised.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "support/files.h"
#include "support/id_dataset.h"
#include "support/multiprocess.h"

namespace {

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
using kindling::data::Example;
using kindling::engine::Engine;
using kindling::engine::Events;

constexpr int64_t kSamples = 96;  // divides every global batch used here: no padding to account for

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// One phase of an elastic job: resumes from the latest checkpoint in ELASTIC_DIR when there is
// one, trains to 3 epochs of ELASTIC_BATCH global samples per iteration, and stops after
// iteration ELASTIC_STOP_AT (0: never) once its checkpoint is written. Each rank appends
// "<epoch> <sample id>" for every sample it trains on to ELASTIC_DIR/ids_<tag>_<rank>.txt; rank
// 0 writes the final weights to weights_<tag>.pt.
KINDLING_WORKER(elastic_phase) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const std::string dir = env("ELASTIC_DIR"), tag = env("ELASTIC_TAG");
  const int64_t stop_at = std::stoll(env("ELASTIC_STOP_AT")), batch = std::stoll(env("ELASTIC_BATCH"));
  auto loader = kd::auto_dataloader(std::make_shared<kindling::testing::IdDataset>(kSamples),
                                    kindling::data::DataLoaderOptions().batch_size(batch).shuffle(true).seed(7));
  at::manual_seed(3);
  auto model = kd::auto_model(torch::nn::Linear(3, 1));
  torch::optim::SGD optimizer(model->parameters(), 0.2);
  auto features = [](const Example& b, std::optional<c10::Device>, bool) {
    return std::make_pair(b.data.narrow(1, 1, 3), b.target);
  };
  Engine trainer = kindling::engine::create_supervised_trainer(
      model, optimizer, [](const at::Tensor& y, const at::Tensor& t) { return at::mse_loss(y, t); },
      kindling::engine::SupervisedTrainerOptions().prepare_batch(features));
  kh::Objects to_save{
      {"trainer", kh::stateful(trainer)}, {"model", kh::stateful(model)}, {"optimizer", kh::stateful(optimizer)}};
  auto checkpoint = std::make_shared<kh::Checkpoint>(to_save, dir, kh::CheckpointOptions().filename_prefix("training"));
  std::ofstream ids(dir + "/ids_" + tag + "_" + std::to_string(kd::get_rank()) + ".txt", std::ios::app);
  trainer.on(Events::ITERATION_STARTED, [&](Engine& e) {
    const at::Tensor id = e.state().batch_as<Example>().data.select(1, 0);
    for (int64_t i = 0; i < id.size(0); ++i) ids << e.state().epoch << " " << id[i].item<float>() << "\n";
  });
  if (stop_at > 0) {
    trainer.on(Events::ITERATION_COMPLETED.every(stop_at), [&](Engine& e) {
      (*checkpoint)(e);
      e.terminate();
    });
  }
  if (auto last = kh::Checkpoint::find_latest(dir, "training")) kh::Checkpoint::load_objects(to_save, *last);
  trainer.run(loader, 3);
  ids.flush();
  if (kd::get_rank() == 0) {
    std::vector<at::Tensor> weights{model->weight.detach().clone(), model->bias.detach().clone()};
    torch::save(weights, dir + "/weights_" + tag + ".pt");
  }
  kd::finalize();
}

std::vector<kindling::testing::RankResult> phase(const std::string& dir, const std::string& tag, int ranks,
                                                 int64_t batch, int64_t stop_at) {
  kindling::testing::LaunchOptions opts;
  opts.world_size = ranks;
  opts.env = {{"ELASTIC_DIR", dir},
              {"ELASTIC_TAG", tag},
              {"ELASTIC_BATCH", std::to_string(batch)},
              {"ELASTIC_STOP_AT", std::to_string(stop_at)}};
  return kindling::testing::run_workers("elastic_phase", opts);
}

// How many times each (epoch, sample id) was trained on, over the ids files of `tags`.
std::map<std::pair<int64_t, int64_t>, int> samples_seen(const std::string& dir, const std::vector<std::string>& tags,
                                                        int ranks) {
  std::map<std::pair<int64_t, int64_t>, int> seen;
  for (const auto& tag : tags) {
    for (int r = 0; r < ranks; ++r) {
      std::ifstream in(dir + "/ids_" + tag + "_" + std::to_string(r) + ".txt");
      int64_t epoch = 0;
      float id = 0;
      while (in >> epoch >> id) ++seen[{epoch, static_cast<int64_t>(id)}];
    }
  }
  return seen;
}

TEST(ElasticResumeTest, ThreeRanksToTwoKeepTheGlobalBatchAndEverySampleOnce) {
  kindling::testing::TempDir elastic("elastic"), whole("elastic");
  // Global batch 12 (4 per rank at 3, 6 at 2); 8 iterations per epoch; stop inside epoch 2.
  auto first = phase(elastic.path(), "a", 3, 12, 11);
  for (const auto& r : first) ASSERT_TRUE(r.ok()) << kindling::testing::describe(first);
  auto second = phase(elastic.path(), "b", 2, 12, 0);
  for (const auto& r : second) ASSERT_TRUE(r.ok()) << kindling::testing::describe(second);
  EXPECT_NE(second[0].err.find("the same global batch, so the epoch goes on at the same sample"), std::string::npos)
      << second[0].err;
  auto seen = samples_seen(elastic.path(), {"a", "b"}, 3);
  for (int64_t epoch = 1; epoch <= 3; ++epoch) {
    for (int64_t id = 0; id < kSamples; ++id) {
      EXPECT_EQ((seen[{epoch, id}]), 1) << "epoch " << epoch << ", sample " << id;
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(3 * kSamples));  // nothing outside the dataset either
  auto reference = phase(whole.path(), "w", 2, 12, 0);
  for (const auto& r : reference) ASSERT_TRUE(r.ok()) << kindling::testing::describe(reference);
  std::vector<at::Tensor> resumed, uninterrupted;
  torch::load(resumed, elastic.path() + "/weights_b.pt");
  torch::load(uninterrupted, whole.path() + "/weights_w.pt");
  // The same samples in the same global batches: only the order of the additions inside the
  // all-reduce differs (3 partial sums against 2), a few float32 ulps per step over 24 steps.
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_TRUE(at::allclose(resumed[i], uninterrupted[i], 1e-5, 1e-6)) << resumed[i] << " vs " << uninterrupted[i];
  }
}

TEST(ElasticResumeTest, AnotherGlobalBatchResumesAtTheSameSampleOrRefuses) {
  // Per-rank batch kept (4): 12 samples per iteration at 3 ranks, 8 at 2. Stopped after 10
  // iterations (2 into epoch 2: 24 samples = 3 iterations of 8), the 2-rank run goes on at
  // sample 24 of epoch 2.
  kindling::testing::TempDir dir("elastic");
  auto first = phase(dir.path(), "a", 3, 12, 10);
  for (const auto& r : first) ASSERT_TRUE(r.ok()) << kindling::testing::describe(first);
  auto second = phase(dir.path(), "b", 2, 8, 0);
  for (const auto& r : second) ASSERT_TRUE(r.ok()) << kindling::testing::describe(second);
  EXPECT_NE(second[0].err.find("resuming at sample 24 of epoch 2"), std::string::npos) << second[0].err;
  auto seen = samples_seen(dir.path(), {"a", "b"}, 3);
  for (int64_t epoch = 1; epoch <= 3; ++epoch) {
    for (int64_t id = 0; id < kSamples; ++id)
      EXPECT_EQ((seen[{epoch, id}]), 1) << "epoch " << epoch << ", sample " << id;
  }
  // Stopped after 11 iterations (36 samples of epoch 2), 36 is not a whole number of batches of
  // 8: the resume is refused with the numbers and what to do, and nothing is trained.
  kindling::testing::TempDir odd("elastic");
  auto third = phase(odd.path(), "a", 3, 12, 11);
  for (const auto& r : third) ASSERT_TRUE(r.ok()) << kindling::testing::describe(third);
  auto refused = phase(odd.path(), "b", 2, 8, 0);
  for (const auto& r : refused) {
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.err.find("stopped after 3 iterations, 36 samples, which is not a whole number of iterations of 8"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("Keep the global batch"), std::string::npos) << r.err;
  }
}

}  // namespace
