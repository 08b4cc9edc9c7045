// Checkpoints that Python's ignite 0.5.5 reads: a metric's state in ignite's layout
// ({"__metric_state_per_rank": [...]}, the layout kindling wrote before still loading), and
// objects grouped into one entry as ignite's to_save={"metrics": {...}}, read by ignite through
// ignite_checkpoint.py where the build's Python has ignite 0.5.5. (Not the other way: ignite's
// files hold OrderedDicts, which LibTorch's reader cannot rebuild, docs/handlers.md.)
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "kindling/engine/engine.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "kindling/metrics/metrics.h"
#include "support/errors.h"
#include "support/metrics.h"
#include "support/multiprocess.h"

namespace kh = kindling::handlers;
namespace km = kindling::metrics;
using kindling::StateDict;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;
using kindling::testing::pick;

namespace {

// The batch the saved metrics saw (ignite_checkpoint.py computes from their saved state).
Value batch() {
  return Value::named({{"logits", at::tensor({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}).reshape({3, 2})},
                       {"y", at::tensor({1, 1, 0}, at::kLong)}});
}

struct Trained {
  torch::nn::Linear model{2, 2};
  std::shared_ptr<km::Metric> accuracy = std::make_shared<km::Accuracy>(pick("logits", "y"));
  std::shared_ptr<km::Metric> loss = std::make_shared<km::Loss>(
      [](const at::Tensor& p, const at::Tensor& y) { return at::cross_entropy_loss(p, y); }, pick("logits", "y"));
  // ignite's to_save={"model": model, "metrics": {"accuracy": ..., "loss": ...}}
  kh::Objects objects() {
    return {{"model", kh::stateful(model)},
            {"metrics", kh::stateful(kh::Objects{{"accuracy", kh::stateful(accuracy)}, {"loss", kh::stateful(loss)}})}};
  }
  void update() {
    for (const auto& m : {accuracy, loss}) m->update(m->output_transform()(batch()));
  }
};

class CheckpointIgniteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/kindling-checkpoint-ignite-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The file a Checkpoint of `run`'s objects writes.
  std::string save(Trained& run) {
    Engine holder([](Engine&, const Value& b) { return b; });
    auto checkpoint = std::make_shared<kh::Checkpoint>(run.objects(), dir_);
    checkpoint->attach(holder, Events::COMPLETED);
    std::vector<Value> one{batch()};
    holder.run(one);
    return checkpoint->last_checkpoint().value();
  }

  // ignite_checkpoint.py's "name value" lines; skips the test where it exits 77.
  std::map<std::string, std::string> ignite(const std::string& mode, const std::string& path) {
    // KINDLING_IGNITE_PYTHON: another Python for a local check (a venv with ignite 0.5.5)
    const char* python = std::getenv("KINDLING_IGNITE_PYTHON");
    const auto r = kindling::testing::run_command(
        {python ? python : KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/handlers/ignite_checkpoint.py", mode, path});
    if (r.exit_code == 77) return {{"SKIP", r.out}};
    EXPECT_TRUE(r.ok()) << kindling::testing::describe({r});
    std::map<std::string, std::string> out;
    std::istringstream lines(r.out);
    for (std::string name, value; lines >> name >> value;) out[name] = value;
    return out;
  }

  std::string dir_;
};

TEST_F(CheckpointIgniteTest, MetricStateIsIgnitesLayout) {
  km::Accuracy acc(pick("logits", "y"));
  acc.update(acc.output_transform()(batch()));
  const StateDict state = acc.state_dict();
  ASSERT_EQ(state.size(), 1u);
  ASSERT_TRUE(state.contains("__metric_state_per_rank"));
  const auto ranks = state.at("__metric_state_per_rank").toList();
  ASSERT_EQ(ranks.size(), 1u) << "one rank";
  const auto mine = ranks.get(0).toGenericDict();
  EXPECT_EQ(mine.at("_num_examples").toInt(), 3);
  EXPECT_EQ(mine.at("_num_correct").toTensor().item<int64_t>(), 1);
  km::Accuracy back(pick("logits", "y"));
  back.load_state_dict(state);
  EXPECT_DOUBLE_EQ(back.compute().number(), 1.0 / 3);
  // ignite's Accuracy saves only its counts: the input type kindling also saves may be absent
  auto counts = mine.copy();
  ASSERT_EQ(counts.erase("_type") + counts.erase("_num_classes"), 2u);
  StateDict ignites = kindling::new_state_dict();
  c10::impl::GenericList of_ranks(c10::AnyType::get());
  of_ranks.push_back(counts);
  ignites.insert("__metric_state_per_rank", of_ranks);
  km::Accuracy from_ignite(pick("logits", "y"));
  from_ignite.load_state_dict(ignites);
  EXPECT_DOUBLE_EQ(from_ignite.compute().number(), 1.0 / 3);
  StateDict lacking = kindling::new_state_dict();
  c10::impl::GenericList one(c10::AnyType::get());
  one.push_back(kindling::new_state_dict());
  lacking.insert("__metric_state_per_rank", one);
  EXPECT_NE(error_of([&] { back.load_state_dict(lacking); }).find("the state of saved rank 0 has no key '"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(back.compute().number(), 1.0 / 3) << "nothing changed";
}

TEST_F(CheckpointIgniteTest, TheLayoutKindlingWroteBeforeStillLoads) {
  StateDict before = kindling::new_state_dict();  // {key: [rank 0's value]}
  c10::impl::GenericList correct(c10::AnyType::get()), examples(c10::AnyType::get());
  correct.push_back(at::tensor(int64_t{2}));
  examples.push_back(int64_t{5});
  before.insert("_num_correct", correct);
  before.insert("_num_examples", examples);
  km::Accuracy acc(pick("logits", "y"));
  acc.load_state_dict(before);
  EXPECT_DOUBLE_EQ(acc.compute().number(), 2.0 / 5);
}

TEST_F(CheckpointIgniteTest, ObjectsGroupedAsOneEntryRoundTrip) {
  Trained saved;
  saved.update();
  const StateDict file = kh::Checkpoint::load_file(save(saved));
  ASSERT_TRUE(file.contains("metrics"));
  const auto metrics = file.at("metrics").toGenericDict();
  EXPECT_EQ(metrics.size(), 2u);
  EXPECT_TRUE(metrics.at("loss").toGenericDict().contains("__metric_state_per_rank"));

  Trained loaded;
  kh::Checkpoint::load_objects(loaded.objects(), file);
  EXPECT_DOUBLE_EQ(loaded.accuracy->compute().number(), saved.accuracy->compute().number());
  EXPECT_DOUBLE_EQ(loaded.loss->compute().number(), saved.loss->compute().number());
  EXPECT_TRUE(at::equal(loaded.model->weight, saved.model->weight));
}

TEST_F(CheckpointIgniteTest, AFailedLoadLeavesAGroupsMembersAsTheyWere) {
  Trained saved;
  saved.update();
  const std::string path = save(saved);
  Trained other;
  const at::Tensor weight = other.model->weight.detach().clone();
  // The group loads first; the metric after it refuses a state that is not its own.
  kh::Objects to_load{{"metrics", kh::stateful(kh::Objects{{"model", kh::stateful(other.model)}})},
                      {"mse", kh::stateful(std::make_shared<km::MeanSquaredError>())}};
  StateDict file = kh::Checkpoint::load_file(path);
  StateDict regrouped = kindling::new_state_dict();
  StateDict inner = kindling::new_state_dict();
  inner.insert("model", file.at("model"));
  regrouped.insert("metrics", inner);
  regrouped.insert("mse", file.at("metrics").toGenericDict().at("accuracy"));
  EXPECT_NE(error_of([&] { kh::Checkpoint::load_objects(to_load, regrouped); }).find("has no key '_sum"),
            std::string::npos);
  EXPECT_TRUE(at::equal(other.model->weight, weight)) << "the group's module was put back";
  // Inside a group: the module loads, the metric after it refuses.
  auto group = kh::stateful(kh::Objects{{"model", kh::stateful(other.model)}, {"accuracy", kh::stateful(other.loss)}});
  EXPECT_NE(error_of([&] {
              group->load_state_dict(file.at("metrics").toGenericDict(), true);
            }).find("the group has no entry 'model'"),
            std::string::npos);
  StateDict mixed = kindling::new_state_dict();
  mixed.insert("model", file.at("model"));
  mixed.insert("accuracy", file.at("metrics").toGenericDict().at("accuracy"));
  EXPECT_NE(error_of([&] { group->load_state_dict(mixed, true); }).find("the group's object 'accuracy'"),
            std::string::npos);
  EXPECT_TRUE(at::equal(other.model->weight, weight));
}

TEST_F(CheckpointIgniteTest, Ignite055LoadsKindlingsCheckpoint) {
  Trained saved;
  saved.update();
  at::NoGradGuard no_grad;
  saved.model->bias.copy_(at::tensor({0.25f, -0.5f}));
  const auto got = ignite("read", save(saved));
  if (got.count("SKIP")) GTEST_SKIP() << got.at("SKIP");
  ASSERT_TRUE(got.count("accuracy") && got.count("loss")) << "ignite printed no values";
  EXPECT_DOUBLE_EQ(std::stod(got.at("accuracy")), saved.accuracy->compute().number());
  EXPECT_NEAR(std::stod(got.at("loss")), saved.loss->compute().number(), 1e-6);
  EXPECT_EQ(got.at("model.bias"), "0.25");
}

}  // namespace
