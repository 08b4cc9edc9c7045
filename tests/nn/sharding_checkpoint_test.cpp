// A sharded model's checkpoints (kindling/handlers/checkpointing/stateful.h): saved whole, equal to
// what the same model and optimizer under DDP save (bit for bit on 2 ranks), read by Python torch's
// own module and Adam, and resumed at another world size (and the other ZeRO stage) as DDP resumes
// from the same file. Sharded files (every rank its own, kindling/handlers/checkpointing/
// sharded_files.h) load at another world size into what the whole file gives; a folder without a
// complete save, a missing file and another model are refused on every rank, changing nothing.
// Saving the module or the optimizer alone is refused.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/error.h>
#include <kindling/handlers/checkpointing/sharded_files.h>
#include <kindling/handlers/checkpointing/stateful.h>
#include <kindling/nn/optimizer_state.h>
#include <kindling/nn/sharding.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>

#include <cstdio>
#include <fstream>
#include <functional>
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

// `body` must throw kindling::UsageError whose message holds `part`.
void expect_refused(const std::string& what, const std::function<void()>& body, const std::string& part) {
  std::string message;
  try {
    body();
  } catch (const kindling::UsageError& e) {
    message = e.what();
  }
  WCHECK(message.find(part) != std::string::npos, << what << ": " << (message.empty() ? "not refused" : message));
}

// The sharded files of the 2-rank save, loaded on 3 ranks into ZeRO-2: the weights and the
// optimizer's state equal those the whole file gave `model` / `optimizer` (bit for bit: the same
// values cut differently). Then the refusals, which change nothing, and two more steps: returns
// the model's state after them (the caller's model takes the same steps).
template <class Model>
kindling::StateDict resumed_from_sharded_files(const std::string& folder, Model& model, torch::optim::Optimizer& optimizer) {
  torch::manual_seed(5);  // other weights than the save's
  UnitNet net;
  auto filed = kd::auto_model(net, kn::ShardingOptions().reshard_after_forward(false));
  torch::optim::Adam filed_optimizer(groups(filed.named_parameters()), torch::optim::AdamOptions(1e-2));
  WCHECK(kh::sharded_save_world(folder) == 2, << "the save's world: " << kh::sharded_save_world(folder));
  kh::load_sharded(folder, *filed.sharded(), &filed_optimizer);
  const auto loaded = filed.sharded()->full_parameters();
  const auto want = model.sharded()->full_parameters();
  for (std::size_t i = 0; i < want.size(); ++i)
    WCHECK(torch::equal(loaded[i].second, want[i].second), << "sharded files: " << want[i].first << " differs");
  expect_same(filed.sharded()->full_optimizer_state_dict(filed_optimizer), model.sharded()->full_optimizer_state_dict(optimizer),
              "sharded files' optimizer");
  const std::string parent = folder.substr(0, folder.rfind('/'));
  expect_refused("a folder without a complete save", [&] { kh::load_sharded(parent, *filed.sharded()); },
                 "holds no complete sharded save");
  kd::barrier();
  const std::string one = folder + "/shard-1-of-2.pt", away = folder + "/moved.pt";
  if (kd::get_rank() == 0) WCHECK(std::rename(one.c_str(), away.c_str()) == 0, << "cannot move " << one);
  kd::barrier();
  // Every rank reads every file of the save (one at a time): each fails on its own.
  expect_refused("a missing file", [&] { kh::load_sharded(folder, *filed.sharded(), &filed_optimizer); }, "shard-1-of-2.pt");
  kd::barrier();
  if (kd::get_rank() == 0) WCHECK(std::rename(away.c_str(), one.c_str()) == 0, << "cannot move back " << one);
  auto other = kd::auto_model(kindling::testing::sequential_mlp({12, 8, 4}), kn::ShardingOptions());
  expect_refused("another model", [&] { kh::load_sharded(folder, *other.sharded()); }, "another model");
  const auto after = filed.sharded()->full_parameters();
  for (std::size_t i = 0; i < after.size(); ++i)
    WCHECK(torch::equal(after[i].second, loaded[i].second), << "a refused load changed " << after[i].first);
  train(filed, filed_optimizer, 3, 2);
  return kh::stateful(filed)->state_dict();
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
  const std::string folder = file.substr(0, file.rfind('/')) + "/sharded";
  const kindling::StateDict from_files = saving ? kindling::new_state_dict() : resumed_from_sharded_files(folder, model, optimizer);
  train(plain, plain_optimizer, saving ? 0 : 3, saving ? 3 : 2);
  train(model, optimizer, saving ? 0 : 3, saving ? 3 : 2);
  auto whole = kindling::new_state_dict();
  whole.insert("model", kh::stateful(model)->state_dict());
  whole.insert("optimizer", kh::stateful(optimizer, model)->state_dict());
  expect_same(whole.at("model"), kh::stateful(plain)->state_dict(), "model");
  expect_same(whole.at("optimizer"), kn::optimizer_state_dict(plain_optimizer), "optimizer");
  if (saving && kd::get_rank() == 0) save(file, whole);
  if (saving) kh::save_sharded(folder, *model.sharded(), &optimizer);
  if (!saving) expect_same(from_files, whole.at("model"), "resumed from sharded files");
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
      {KINDLING_PYTHON, std::string(KINDLING_SOURCE_DIR) + "/tests/nn/sharding_state_in_python.py", dir.path() + "/state.pt",
       dir.path() + "/sharded"},
      {}, std::chrono::seconds(120));
  ASSERT_TRUE(python.ok()) << python.out << python.err;
  EXPECT_NE(python.out.find("loaded into torch: parameters=6 states=6 step=4"), std::string::npos) << python.out;
  // 6 parameters and their two Adam moments each.
  EXPECT_NE(python.out.find("sharded files put together in torch: 18 tensors equal the whole file's"), std::string::npos)
      << python.out;
  opts.env["SHARDING_TEST_SAVE"] = "";
  opts.world_size = 3;
  auto resumed = kindling::testing::run_workers("sharding_saves_or_resumes", opts);
  for (const auto& r : resumed) EXPECT_TRUE(r.ok()) << kindling::testing::describe(resumed);
}

}  // namespace sharding_checkpoint_test
