// A sharded model's checkpoints (kindling/handlers/checkpointing/stateful.h): saved whole, equal to
// what the same model and optimizer under DDP save (bit for bit on 2 ranks), read by Python torch's
// own module and Adam, and resumed at another world size (and the other ZeRO stage) as DDP resumes
// from the same file. Saving the module or the optimizer alone is refused.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/error.h>
#include <kindling/handlers/checkpointing/stateful.h>
#include <kindling/nn/optimizer_state.h>
#include <kindling/nn/sharding.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/multiprocess.h"
#include "support/sharded_models.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;
namespace kh = kindling::handlers;
using kindling::testing::UnitNet;

namespace sharding_checkpoint_test {

// Weights at half the rate of the biases (the Python side builds the same groups).
std::vector<torch::optim::OptimizerParamGroup> groups(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<torch::Tensor> weights, rest;
  for (const auto& [name, p] : named) (name.find("weight") != std::string::npos ? weights : rest).push_back(p);
  return {torch::optim::OptimizerParamGroup(weights, std::make_unique<torch::optim::AdamOptions>(5e-3)),
          torch::optim::OptimizerParamGroup(rest)};
}

std::vector<std::pair<std::string, torch::Tensor>> named(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (const auto& p : m.named_parameters()) all.emplace_back(p.key(), p.value());
  return all;
}

template <class Model>
void train(Model& model, torch::optim::Optimizer& optimizer, int from, int steps) {
  for (int step = from; step < from + steps; ++step) {
    optimizer.zero_grad();
    auto [x, y] = kindling::testing::sharding_batch(step);
    torch::mse_loss(model(x), y).backward();
    optimizer.step();
  }
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  const bool same = kd::get_world_size() == 2 ? torch::equal(a, b) : torch::allclose(a, b, 1e-6, 1e-7);
  WCHECK(same, << what << ": max difference " << (a - b).abs().max().item<double>());
}

// Every tensor of `got` (a state_dict, nested) against the same key of `want`.
void expect_same(const c10::IValue& got, const c10::IValue& want, const std::string& what) {
  if (want.isTensor()) {
    WCHECK(got.isTensor(), << what << ": not a tensor");
    expect_close(got.toTensor(), want.toTensor(), what);
  } else if (want.isGenericDict()) {
    const auto g = got.toGenericDict();
    const auto w = want.toGenericDict();
    WCHECK(g.size() == w.size(), << what << ": " << g.size() << " entries, expected " << w.size());
    for (const auto& kv : w) {
      const std::string key = kv.key().isString() ? kv.key().toStringRef() : std::to_string(kv.key().toInt());
      WCHECK(g.contains(kv.key()), << what << ": no '" << key << "'");
      expect_same(g.at(kv.key()), kv.value(), what + "." + key);
    }
  }
}

void initialize() {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
}

void save(const std::string& file, const kindling::StateDict& sd) {
  const auto bytes = torch::pickle_save(sd);
  std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

kindling::StateDict load(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toGenericDict();
}

// Saves at one world size (ZeRO-3), or resumes at another (ZeRO-2) and compares with DDP.
KINDLING_WORKER(sharding_saves_or_resumes) {
  initialize();
  const std::string file = std::getenv("SHARDING_TEST_FILE");
  const bool saving = std::getenv("SHARDING_TEST_SAVE") && *std::getenv("SHARDING_TEST_SAVE");
  torch::manual_seed(77);
  UnitNet plain_net;
  auto plain = kd::auto_model(plain_net);
  torch::optim::Adam plain_optimizer(groups(named(*plain_net)), torch::optim::AdamOptions(1e-2));
  torch::manual_seed(77);
  UnitNet net;
  auto model = kd::auto_model(net, kn::ShardingOptions().reshard_after_forward(saving));
  torch::optim::Adam optimizer(groups(model.named_parameters()), torch::optim::AdamOptions(1e-2));
  if (!saving) {
    const auto sd = load(file);
    kh::stateful(plain)->load_state_dict(sd.at("model").toGenericDict(), true);
    kn::load_optimizer_state_dict(plain_optimizer, sd.at("optimizer").toGenericDict());
    kh::stateful(model)->load_state_dict(sd.at("model").toGenericDict(), true);
    kh::stateful(optimizer, model)->load_state_dict(sd.at("optimizer").toGenericDict(), true);
  }
  train(plain, plain_optimizer, saving ? 0 : 3, saving ? 3 : 2);
  train(model, optimizer, saving ? 0 : 3, saving ? 3 : 2);
  auto whole = kindling::new_state_dict();
  whole.insert("model", kh::stateful(model)->state_dict());
  whole.insert("optimizer", kh::stateful(optimizer, model)->state_dict());
  expect_same(whole.at("model"), kh::stateful(plain)->state_dict(), "model");
  expect_same(whole.at("optimizer"), kn::optimizer_state_dict(plain_optimizer), "optimizer");
  if (saving && kd::get_rank() == 0) save(file, whole);
  std::string refused;
  try {
    kh::stateful(net);
  } catch (const kindling::UsageError& e) {
    refused = e.what();
  }
  WCHECK(refused.find("stateful(model)") != std::string::npos, << "the module alone: " << refused);
  refused.clear();
  try {
    kh::stateful(optimizer);
  } catch (const kindling::UsageError& e) {
    refused = e.what();
  }
  WCHECK(refused.find("stateful(optimizer, model)") != std::string::npos, << "the optimizer alone: " << refused);
  kd::finalize();
}

TEST(ShardingCheckpoint, SavesWholeForPythonAndResumesAtAnotherWorldSize) {
  const kindling::testing::TempDir dir("sharding");
  kindling::testing::LaunchOptions opts;
  opts.env = {{"SHARDING_TEST_FILE", dir.path() + "/state.pt"}, {"SHARDING_TEST_SAVE", "1"}};
  auto saved = kindling::testing::run_workers("sharding_saves_or_resumes", opts);
  for (const auto& r : saved) ASSERT_TRUE(r.ok()) << kindling::testing::describe(saved);
  const auto python = kindling::testing::run_command(
      {KINDLING_PYTHON, std::string(KINDLING_SOURCE_DIR) + "/tests/nn/sharding_state_in_python.py", dir.path() + "/state.pt"},
      {}, std::chrono::seconds(120));
  ASSERT_TRUE(python.ok()) << python.out << python.err;
  EXPECT_NE(python.out.find("loaded into torch: parameters=6 states=6 step=4"), std::string::npos) << python.out;
  opts.env["SHARDING_TEST_SAVE"] = "";
  opts.world_size = 3;
  auto resumed = kindling::testing::run_workers("sharding_saves_or_resumes", opts);
  for (const auto& r : resumed) EXPECT_TRUE(r.ok()) << kindling::testing::describe(resumed);
}

}  // namespace sharding_checkpoint_test
