// Checkpoint and DiskSaver: ignite's file names and retention, loading back (and failing
// without changing anything), files Python's torch.load and torchvision read, and saves
// killed at random points that never leave a half file under a final name.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <thread>

#include "support/files.h"
#include "support/errors.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/models/resnet.h"
#include "support/multiprocess.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

using kindling::testing::error_of;

torch::nn::Linear make_linear(int seed) {
  at::manual_seed(seed);
  return torch::nn::Linear(4, 3);
}

TEST(CheckpointTest, KeepsTheBestWithIgnitesFileNames) {
  const kindling::testing::TempDir dir_folder("ckpt");
  const std::string dir = dir_folder.path();
  auto model = make_linear(1);
  Engine evaluator([](Engine&, const int& b) -> Value { return b; });
  const std::vector<double> scores{0.5, 0.9, 0.7, 0.95, 0.6};
  int64_t epoch = 0;
  auto checkpoint = std::make_shared<kh::Checkpoint>(
      kh::Objects{{"model", kh::stateful(model)}}, std::make_shared<kh::DiskSaver>(dir),
      kh::CheckpointOptions()
          .filename_prefix("best")
          .n_saved(2)
          .score_name("test_accuracy")
          .score_function([&](Engine&) { return scores[static_cast<std::size_t>(epoch - 1)]; })
          .global_step_transform([&](Engine&, const kindling::engine::Event&) { return epoch; }));
  checkpoint->attach(evaluator, Events::COMPLETED);
  int saved_events = 0;
  evaluator.on(kh::Checkpoint::SAVED_CHECKPOINT, [&] { ++saved_events; });
  std::vector<int> data{1};
  for (epoch = 1; epoch <= 5; ++epoch) evaluator.run(data);
  EXPECT_EQ(kindling::testing::files_in(dir),
            (std::vector<std::string>{"best_model_2_test_accuracy=0.9000.pt", "best_model_4_test_accuracy=0.9500.pt"}));
  EXPECT_EQ(saved_events, 4);  // epochs 1, 2 (room), 3 (0.7 beats 0.5) and 4 earned a place
  EXPECT_EQ(*checkpoint->last_checkpoint(), dir + "/best_model_4_test_accuracy=0.9500.pt");
  // The checkpoint's own state round-trips.
  kh::Checkpoint other(kh::Objects{{"model", kh::stateful(model)}}, dir);
  other.load_state_dict(checkpoint->state_dict());
  ASSERT_EQ(other.saved().size(), 2u);
  EXPECT_EQ(other.saved()[1].filename, "best_model_4_test_accuracy=0.9500.pt");
}

TEST(CheckpointTest, DefaultScoreFunctionReadsTheMetricWithItsSign) {
  Engine evaluator([](Engine&, const int&) {});
  evaluator.name = "evaluator";
  evaluator.state().metrics["loss"] = 0.25;
  evaluator.state().metrics["confusion"] = at::eye(2);
  EXPECT_EQ(kh::Checkpoint::get_default_score_fn("loss")(evaluator), 0.25);
  EXPECT_EQ(kh::Checkpoint::get_default_score_fn("loss", -1.0)(evaluator), -0.25);
  std::string message = error_of<kindling::UsageError>([&] { kh::Checkpoint::get_default_score_fn("acc")(evaluator); });
  EXPECT_NE(
      message.find("the score's metric 'acc' is not among the metrics of engine evaluator (it has: confusion, loss)"),
      std::string::npos)
      << message;
  message = error_of<kindling::UsageError>([&] { kh::Checkpoint::get_default_score_fn("confusion")(evaluator); });
  EXPECT_NE(message.find("'confusion' is not a number"), std::string::npos) << message;
  // ignite accepts only 1 and -1; anything else is refused when the function is made.
  for (const double sign : {0.0, 2.0, -0.5, std::nan("")}) {
    message = error_of<kindling::UsageError>([&] { kh::Checkpoint::get_default_score_fn("loss", sign); });
    EXPECT_NE(message.find("score_sign should be 1 or -1 (ignite's rule), got "), std::string::npos) << message;
    EXPECT_NE(message.find("pass 1 for a metric where higher is better"), std::string::npos) << message;
  }
  EXPECT_NE(error_of<kindling::UsageError>([&] { kh::Checkpoint::get_default_score_fn("loss", 2.0); }).find("got 2;"),
            std::string::npos);
}

TEST(CheckpointTest, TrainingCheckpointRoundTripsEveryObject) {
  const kindling::testing::TempDir dir_folder("ckpt");
  const std::string dir = dir_folder.path();
  auto model = make_linear(2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Engine trainer([&](Engine&, const int&) -> Value {
    optimizer.zero_grad();
    auto loss = model->forward(at::ones({2, 4})).pow(2).mean();
    loss.backward();
    optimizer.step();
    return loss.item<double>();
  });
  kh::Objects objects{{"model", kh::stateful(model)},
                      {"optimizer", kh::stateful(optimizer)},
                      {"trainer", kh::stateful(trainer)},
                      {"rng", kh::rng_states()}};
  auto checkpoint = std::make_shared<kh::Checkpoint>(objects, std::make_shared<kh::DiskSaver>(dir),
                                                     kh::CheckpointOptions().filename_prefix("training"));
  checkpoint->attach(trainer, Events::ITERATION_COMPLETED.every(3));
  std::vector<int> data{1, 2, 3, 4, 5};
  trainer.run(data, 2);
  EXPECT_EQ(kindling::testing::files_in(dir), std::vector<std::string>{"training_checkpoint_9.pt"});

  // Fresh objects, loaded from the file, equal the saved ones.
  const kindling::StateDict file = kh::Checkpoint::load_file(dir + "/training_checkpoint_9.pt");
  auto model2 = make_linear(3);
  torch::optim::SGD optimizer2(model2->parameters(), torch::optim::SGDOptions(0.5));
  Engine trainer2([](Engine&, const int&) -> Value { return 0.0; });
  kh::Checkpoint::load_objects(
      {{"model", kh::stateful(model2)}, {"optimizer", kh::stateful(optimizer2)}, {"trainer", kh::stateful(trainer2)}},
      dir + "/training_checkpoint_9.pt");
  EXPECT_EQ(trainer2.state().iteration, 9);
  EXPECT_EQ(trainer2.state().epoch_length, 5);
  const auto saved_weight = file.at("model").toGenericDict().at("weight").toTensor();
  EXPECT_TRUE(at::equal(model2->weight, saved_weight));
  auto& group = static_cast<torch::optim::SGDOptions&>(optimizer2.param_groups()[0].options());
  EXPECT_DOUBLE_EQ(group.lr(), 0.1);
  EXPECT_DOUBLE_EQ(group.momentum(), 0.9);
  // Same next step from the same state: the momentum buffers were restored.
  auto step = [](torch::nn::Linear& m, torch::optim::SGD& o) {
    o.zero_grad();
    m->forward(at::ones({2, 4})).pow(2).mean().backward();
    o.step();
    return m->weight.detach().clone();
  };
  auto model3 = make_linear(4);
  torch::optim::SGD optimizer3(model3->parameters(), torch::optim::SGDOptions(0.5));
  kh::Checkpoint::load_objects({{"model", kh::stateful(model3)}, {"optimizer", kh::stateful(optimizer3)}}, file);
  EXPECT_TRUE(at::equal(step(model2, optimizer2), step(model3, optimizer3)));
}

// ignite numbers files (and ranks them when there is no score) by the engine's iteration,
// whichever event saves and whatever another Checkpoint fired before (SAVED_CHECKPOINT).
TEST(CheckpointTest, FilesAreNumberedByTheEnginesIterationOnAnyEvent) {
  const kindling::testing::TempDir dir_folder("ckpt");
  const std::string dir = dir_folder.path();
  auto model = make_linear(3);
  Engine engine([](Engine&, const int& b) -> Value { return b; });
  kh::Objects objects{{"model", kh::stateful(model)}};
  auto a = std::make_shared<kh::Checkpoint>(objects, dir, kh::CheckpointOptions().filename_prefix("a").n_saved_all());
  auto b = std::make_shared<kh::Checkpoint>(objects, dir, kh::CheckpointOptions().filename_prefix("b").n_saved_all());
  auto c = std::make_shared<kh::Checkpoint>(objects, dir, kh::CheckpointOptions().filename_prefix("c").n_saved(2));
  a->attach(engine, Events::EPOCH_COMPLETED);
  b->attach(engine, Events::EPOCH_COMPLETED);
  c->attach(engine, Events::ITERATION_COMPLETED.every(4));
  std::vector<int> data{1, 2, 3, 4, 5};
  engine.run(data, 3);
  EXPECT_EQ(kindling::testing::files_in(dir),
            (std::vector<std::string>{"a_model_10.pt", "a_model_15.pt", "a_model_5.pt", "b_model_10.pt",
                                      "b_model_15.pt", "b_model_5.pt", "c_model_12.pt", "c_model_8.pt"}));
}

// Written as an ignite user writes it: a temporary attached from a helper function. The
// engine keeps it alive; one that no std::shared_ptr owns is refused, not read after free.
void attach_latest_checkpoint(Engine& trainer, kh::Objects objects, const std::string& dir) {
  std::make_shared<kh::Checkpoint>(std::move(objects), dir, kh::CheckpointOptions().filename_prefix("latest"))
      ->attach(trainer, Events::EPOCH_COMPLETED);
}

TEST(CheckpointTest, TheEngineKeepsAnAttachedCheckpointAlive) {
  const kindling::testing::TempDir dir_folder("ckpt");
  const std::string dir = dir_folder.path();
  auto model = make_linear(4);
  Engine trainer([](Engine&, const int& b) -> Value { return b; });
  attach_latest_checkpoint(trainer, {{"model", kh::stateful(model)}}, dir);
  std::vector<int> data{1, 2, 3};
  trainer.run(data, 2);
  EXPECT_EQ(kindling::testing::files_in(dir), std::vector<std::string>{"latest_model_6.pt"});
  kh::Checkpoint on_stack(kh::Objects{{"model", kh::stateful(model)}}, dir);
  const std::string msg = error_of<kindling::UsageError>([&] { on_stack.attach(trainer, Events::COMPLETED); });
  EXPECT_NE(msg.find("kindling::handlers::Checkpoint.attach: the object must be owned by a std::shared_ptr"),
            std::string::npos)
      << msg;
}

TEST(CheckpointTest, MismatchedOrBrokenCheckpointsNameTheProblemAndChangeNothing) {
  const kindling::testing::TempDir dir_folder("ckpt");
  const std::string dir = dir_folder.path();
  auto model = make_linear(5);
  Engine engine([](Engine&, const int& b) -> Value { return b; });
  kh::Checkpoint checkpoint({{"model", kh::stateful(model)}, {"trainer", kh::stateful(engine)}}, dir);
  std::vector<int> data{1};
  engine.on(Events::COMPLETED, [&](Engine& e) { checkpoint(e); });
  engine.run(data);
  const std::string path = dir + "/checkpoint_1.pt";
  ASSERT_EQ(kindling::testing::files_in(dir), std::vector<std::string>{"checkpoint_1.pt"});

  at::manual_seed(9);
  torch::nn::Linear other(4, 5);  // another model: wrong shapes
  const at::Tensor before = other->weight.detach().clone();
  Engine other_engine([](Engine&, const int& b) -> Value { return b; });
  const std::string wrong = error_of([&] {
    kh::Checkpoint::load_objects({{"trainer", kh::stateful(other_engine)}, {"model", kh::stateful(other)}}, path);
  });
  EXPECT_NE(wrong.find(path), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("'model'"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("key 'weight'"), std::string::npos) << wrong;
  EXPECT_TRUE(at::equal(other->weight, before));
  EXPECT_EQ(other_engine.state().iteration, 0);  // loaded before the model failed, then restored

  const std::string missing = error_of([&] {
    kh::Checkpoint::load_objects({{"optimizer", kh::stateful(other)}, {"model", kh::stateful(model)}}, path);
  });
  EXPECT_NE(missing.find("object 'optimizer' is not found"), std::string::npos) << missing;

  // A truncated copy.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir + "/truncated.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const std::string truncated = error_of([&] {
    kh::Checkpoint::load_objects({{"model", kh::stateful(model)}}, dir + "/truncated.pt");
  });
  EXPECT_NE(truncated.find(dir + "/truncated.pt"), std::string::npos) << truncated;
  EXPECT_NE(truncated.find("is damaged: no end-of-archive record ends the file"), std::string::npos) << truncated;
  EXPECT_NE(truncated.find("is an incomplete torch.save archive (truncated or corrupt"), std::string::npos)
      << truncated;
  EXPECT_NE(error_of([&] { kh::Checkpoint::load_file(dir + "/absent.pt"); }).find("cannot open"), std::string::npos);
}

// Optimizer entries are checked before anything is applied: per-parameter buffers must have
// their parameter's shape, and LibTorch's own archive (which only optimizers kindling cannot
// save field by field use) never reaches an SGD/Adam/AdamW.
TEST(CheckpointTest, OptimizerStateIsCheckedBeforeUse) {
  auto train_once = [](torch::nn::Linear& m, torch::optim::Optimizer& o) {
    o.zero_grad();
    m->forward(at::ones({2, m->options.in_features()})).pow(2).mean().backward();
    o.step();
  };
  // RMSprop goes through LibTorch's archive, and comes back.
  auto a = make_linear(1);
  torch::optim::RMSprop rms(a->parameters(), torch::optim::RMSpropOptions(0.01));
  train_once(a, rms);
  const kindling::StateDict rms_state = kh::stateful(rms)->state_dict();
  ASSERT_TRUE(rms_state.contains("torch_archive"));
  auto b = make_linear(1);
  torch::optim::RMSprop rms2(b->parameters(), torch::optim::RMSpropOptions(0.5));
  kh::stateful(rms2)->load_state_dict(rms_state);
  // LibTorch's archive carries the per-parameter state (it keeps the receiver's options).
  ASSERT_EQ(rms2.state().size(), 2u);
  const auto square_avgs = [](torch::optim::RMSprop& o) {  // order-free: the sorted sums per parameter
    std::vector<double> sums;
    for (const auto& kv : o.state())
      sums.push_back(static_cast<torch::optim::RMSpropParamState&>(*kv.second).square_avg().sum().item<double>());
    std::sort(sums.begin(), sums.end());
    return sums;
  };
  EXPECT_EQ(square_avgs(rms), square_avgs(rms2));
  EXPECT_GT(square_avgs(rms2).back(), 0.0);

  // ... but an SGD refuses it without opening it.
  auto c = make_linear(1);
  torch::optim::SGD sgd(c->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const std::string archive = error_of([&] { kh::stateful(sgd)->load_state_dict(rms_state); });
  EXPECT_NE(archive.find("holds a LibTorch optimizer archive"), std::string::npos) << archive;
  EXPECT_NE(archive.find("load it into the kind of optimizer that saved it"), std::string::npos) << archive;

  // Momentum buffers of another model's shapes (same number of parameters) are refused,
  // and the optimizer keeps its state.
  train_once(c, sgd);
  const kindling::StateDict small = kh::stateful(sgd)->state_dict();
  at::manual_seed(3);
  torch::nn::Linear wide(4, 5);
  torch::optim::SGD sgd_wide(wide->parameters(), torch::optim::SGDOptions(0.2).momentum(0.5));
  train_once(wide, sgd_wide);
  const kindling::StateDict before = kh::stateful(sgd_wide)->state_dict();
  const std::string shapes = error_of([&] { kh::stateful(sgd_wide)->load_state_dict(small); });
  EXPECT_NE(shapes.find("parameter 0 (group 0) has a 'momentum_buffer' of shape [3, 4]"), std::string::npos) << shapes;
  EXPECT_NE(shapes.find("the parameter's shape is [5, 4]"), std::string::npos) << shapes;
  const kindling::StateDict after = kh::stateful(sgd_wide)->state_dict();
  EXPECT_DOUBLE_EQ(after.at("param_groups").toList().get(0).toGenericDict().at("lr").toDouble(), 0.2);
  EXPECT_TRUE(at::equal(before.at("state").toGenericDict().at(0).toGenericDict().at("momentum_buffer").toTensor(),
                        after.at("state").toGenericDict().at(0).toGenericDict().at("momentum_buffer").toTensor()));
}

TEST(DiskSaverTest, RequireEmptyAndStaleTemporaryFiles) {
  const kindling::testing::TempDir dir_folder("ckpt");
  const std::string dir = dir_folder.path();
  std::ofstream(dir + "/old.pt") << "x";
  std::ofstream(dir + "/.kindling-partial-123-model_5.pt") << "half";
  const std::string e = error_of([&] { kh::DiskSaver saver(dir); });
  EXPECT_NE(e.find("old.pt"), std::string::npos) << e;
  EXPECT_NE(e.find("require_empty(false)"), std::string::npos) << e;
  kh::DiskSaver saver(dir, kh::DiskSaverOptions().require_empty(false));
  EXPECT_EQ(kindling::testing::files_in(dir), std::vector<std::string>{"old.pt"});  // the partial file is gone
  EXPECT_THROW(kh::DiskSaver(dir + "/a/b", kh::DiskSaverOptions().create_dir(false)), kindling::UsageError);
  kh::DiskSaver nested(dir + "/a/b");
  nested.save({'h', 'i'}, "x.pt");
  EXPECT_EQ(kindling::testing::files_in(dir + "/a/b"), std::vector<std::string>{"x.pt"});
}

// A child saves checkpoints in a loop; the parent kills it at a random moment, 50 times.
// Every file under a final name must load, and the latest complete checkpoint must be there.
TEST(DiskSaverTest, KilledSavesNeverLeaveHalfFiles) {
  const kindling::testing::TempDir dir_folder("ckpt");
  const std::string dir = dir_folder.path();
  std::mt19937 rng(7);
  int64_t newest_seen = -1;
  for (int round = 0; round < 50; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      at::manual_seed(round);
      auto big = torch::nn::Linear(512, 512);  // ~1 MiB per file
      kh::Checkpoint checkpoint({{"model", kh::stateful(big)}},
                                std::make_shared<kh::DiskSaver>(dir, kh::DiskSaverOptions().require_empty(false)),
                                kh::CheckpointOptions().n_saved(1));
      Engine engine([](Engine&, const int& b) -> Value { return b; });
      engine.on(Events::ITERATION_COMPLETED, [&](Engine& e) { checkpoint(e); });
      engine.state().iteration = 0;
      std::vector<int> data(100000, 0);
      // Continue numbering after the files already there, so that the newest name grows.
      kindling::StateDict start = kindling::new_state_dict();
      start.insert("epoch_length", static_cast<int64_t>(data.size()));
      start.insert("iteration", static_cast<int64_t>(round * 1000));
      start.insert("max_epochs", static_cast<int64_t>(100));
      engine.load_state_dict(start);
      engine.run(data);
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(20000, 120000)(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    int complete = 0;
    for (const auto& name : kindling::testing::files_in(dir)) {
      if (name.rfind(".kindling-partial-", 0) == 0) continue;  // removed by the next saver
      ASSERT_EQ(name.substr(name.size() - 3), ".pt");
      EXPECT_NO_THROW(kh::Checkpoint::load_file(dir + "/" + name)) << name << " in round " << round;
      const int64_t step = std::stoll(name.substr(6, name.size() - 9));  // model_<step>.pt
      newest_seen = std::max(newest_seen, step);
      ++complete;
    }
    // A child may be killed before its first save (a loaded machine starts it slowly), but
    // once a complete checkpoint exists, a kill must never leave the folder without one.
    EXPECT_GE(complete, newest_seen >= 0 ? 1 : 0) << "round " << round << ": the previous checkpoint is gone";
  }
  EXPECT_GT(newest_seen, 0);
}

// torch.load in Python reads a training checkpoint as nested dicts, and a kindling ResNet-18's
// file loads into torchvision's resnet18 with strict load_state_dict.
TEST(CheckpointTest, PythonAndTorchvisionReadTheFiles) {
  const kindling::testing::TempDir dir_folder("ckpt");
  const std::string dir = dir_folder.path();
  auto resnet = kindling::models::resnet18(kindling::models::ResNetOptions().num_classes(10));
  torch::optim::SGD optimizer(resnet->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  optimizer.zero_grad();
  resnet->forward(at::randn({2, 3, 32, 32})).sum().backward();
  optimizer.step();
  Engine trainer([](Engine&, const int& b) -> Value { return b; });
  std::vector<int> data{1, 2};
  trainer.run(data);
  kh::Checkpoint best({{"model", kh::stateful(resnet)}}, dir, kh::CheckpointOptions().filename_prefix("best"));
  kh::Checkpoint training({{"model", kh::stateful(resnet)},
                           {"optimizer", kh::stateful(optimizer)},
                           {"trainer", kh::stateful(trainer)},
                           {"rng", kh::rng_states()}},
                          dir, kh::CheckpointOptions().filename_prefix("training"));
  trainer.on(Events::COMPLETED, [&](Engine& e) {
    best(e);
    training(e);
  });
  trainer.run(data);
  const double weight_sum = resnet->named_parameters()["fc.weight"].sum().item<double>();
  const std::string script = std::string(KINDLING_SOURCE_DIR) + "/tests/handlers/read_checkpoint.py";
  auto result = kindling::testing::run_command(
      {KINDLING_PYTHON, script, dir + "/best_model_2.pt", dir + "/training_checkpoint_2.pt"}, {},
      std::chrono::seconds(120));
  ASSERT_TRUE(result.ok()) << result.out << result.err;
  EXPECT_NE(result.out.find("torchvision resnet18: loaded strictly"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("training keys: model optimizer rng trainer"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("trainer: epoch_length=2 iteration=2 max_epochs=1"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("optimizer: groups=1 lr=0.1 momentum=0.9 states=62"), std::string::npos) << result.out;
  char expected[64];
  std::snprintf(expected, sizeof(expected), "fc.weight sum %.5f", weight_sum);
  EXPECT_NE(result.out.find(expected), std::string::npos) << result.out << " expected " << expected;
}

}  // namespace
