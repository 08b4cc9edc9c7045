// ignite's common helpers for the best model (kindling/handlers/common.h):
// save_best_model_by_val_score and gen_save_best_models_by_val_score keep the n best by the
// evaluator's metric, named as ignite names them, at the trainer's epoch;
// add_early_stopping_by_val_score stops the trainer after `patience` evaluations without a
// better score; score_sign -1 for a metric where lower is better; misuse refused.
#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kindling/handlers/common.h"
#include "support/errors.h"
#include "support/files.h"

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;
using kindling::testing::TempDir;

namespace common_best_test {

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

// A trainer of `scores.size()` epochs whose evaluator, run after each epoch, reports the next
// score as its metric "Acc"; the helpers are attached by `attach`.
struct Scripted {
  std::vector<double> scores;
  Engine trainer{[](Engine&, const int& b) -> Value { return b; }};
  Engine evaluator{[](Engine&, const int& b) -> Value { return b; }};
  std::size_t evaluations = 0;

  explicit Scripted(std::vector<double> s) : scores(std::move(s)) {
    evaluator.on(Events::EPOCH_COMPLETED, [this](Engine& e) { e.state().metrics["Acc"] = scores.at(evaluations++); });
    trainer.on(Events::EPOCH_COMPLETED, [this](Engine&) {
      std::vector<int> one{1};
      evaluator.run(one, 1);
    });
  }
  void run() {
    std::vector<int> data{1, 2};
    trainer.run(data, static_cast<int64_t>(scores.size()));
  }
};

TEST(CommonBestTest, KeepsTheBestAtTheTrainersEpochAndStopsEarly) {
  TempDir dir("best");
  auto model = std::make_shared<torch::nn::LinearImpl>(2, 1);
  Scripted s({0.5, 0.7, 0.6, 0.8, 0.75, 0.74, 0.73, 0.9});
  auto best =
      kh::save_best_model_by_val_score(dir.path() + "/models", s.evaluator, kh::stateful(model), "Acc", 2, &s.trainer);
  auto stopping = kh::add_early_stopping_by_val_score(3, s.evaluator, s.trainer, "Acc");
  s.run();
  EXPECT_EQ(s.trainer.state().epoch, 7) << "0.8 at epoch 4, then three evaluations without better";
  EXPECT_EQ(stopping->best_score(), 0.8);
  EXPECT_EQ(files_in(dir.path() + "/models"),
            (std::set<std::string>{"best_model_4_val_acc=0.8000.pt", "best_model_5_val_acc=0.7500.pt"}))
      << "each better score replaces the lowest kept: .5, .7; .7, .6; .7, .8; .8, .75";
  ASSERT_EQ(best->saved().size(), 2u);
  EXPECT_EQ(best->saved().back().priority, 0.8);
}

TEST(CommonBestTest, LowerIsBetterWithScoreSignMinusOneAndOtherObjects) {
  TempDir dir("best-loss");
  auto model = std::make_shared<torch::nn::LinearImpl>(2, 1);
  Scripted s({0.9, 0.4, 0.6, 0.3});
  auto saver = std::make_shared<kh::DiskSaver>(dir.path());
  kh::gen_save_best_models_by_val_score(saver, s.evaluator,
                                        {{"net", kh::stateful(model)}, {"trainer", kh::stateful(s.trainer)}}, "Acc", 1,
                                        nullptr, "test", -1.0);
  s.run();
  // No trainer given: no step in the name (ignite's rule for a scored checkpoint without a transform).
  EXPECT_EQ(files_in(dir.path()), (std::set<std::string>{"best_checkpoint_test_acc=-0.3000.pt"}));
  const auto saved = kh::Checkpoint::load_file(dir.path() + "/best_checkpoint_test_acc=-0.3000.pt");
  EXPECT_TRUE(saved.contains("net") && saved.contains("trainer"));

  Engine evaluator([](Engine&, const int& b) -> Value { return b; });
  EXPECT_NE(error_of([&] { kh::add_early_stopping_by_val_score(0, evaluator, s.trainer, "Acc"); }).find("patience"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { kh::add_early_stopping_by_val_score(2, evaluator, s.trainer, "Acc", 2.0); }).find("score_sign"),
      std::string::npos);
  // A metric the evaluator does not have: the score function says which it has.
  auto wrong = kh::save_best_model_by_val_score(dir.path() + "/none", evaluator, kh::stateful(model), "missing");
  std::vector<int> one{1};
  EXPECT_NE(error_of([&] { evaluator.run(one, 1); }).find("missing"), std::string::npos);
}

}  // namespace common_best_test
