// Engine::logger: ignite's lines (run start, each epoch's time, the end) at INFO through
// kindling's log, silenced by the log level; INFO lowered to DEBUG on ranks other than 0;
// a setup_logger logger assigned to the engine; a logger of one's own; the supervised
// engines' names, and their evaluator's lines at DEBUG.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/supervised.h"
#include "kindling/handlers/loggers/setup_logger.h"
#include "kindling/log.h"
#include "support/errors.h"

namespace {

namespace ke = kindling::engine;
using kindling::LogLevel;

// The launcher variables the tests set; each test starts without them and they are restored.
const char* const kLauncherVariables[] = {"RANK",
                                          "WORLD_SIZE",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE"};

// Restores the log level and the launcher variables.
class EngineLoggerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kLauncherVariables) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    kindling::set_log_level(saved_level_);
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  LogLevel saved_level_ = kindling::log_level();
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Two epochs of three iterations; what the engine wrote on stderr.
std::string run_two_epochs(ke::Engine& engine) {
  std::vector<int> data{1, 2, 3};
  ::testing::internal::CaptureStderr();
  engine.run(data, 2);
  return ::testing::internal::GetCapturedStderr();
}

ke::Engine make_trainer() {
  ke::Engine trainer([](ke::Engine&, const int& b) { return static_cast<double>(b); });
  trainer.name = "trainer";
  return trainer;
}

TEST_F(EngineLoggerTest, DefaultLoggerWritesIgnitesLinesAtInfo) {
  kindling::set_log_level(LogLevel::kInfo);
  ke::Engine trainer = make_trainer();
  const std::string err = run_two_epochs(trainer);
  EXPECT_NE(err.find("trainer run starting with max_epochs=2."), std::string::npos) << err;
  const std::regex epoch_line(R"(trainer: Epoch\[[12]\] Complete\. Time taken: \d\d:\d\d:\d\d\.\d\d\d)");
  EXPECT_EQ(std::distance(std::sregex_iterator(err.begin(), err.end(), epoch_line), std::sregex_iterator()), 2) << err;
  EXPECT_TRUE(std::regex_search(err, std::regex(R"(trainer run complete\. Time taken: \d\d:\d\d:\d\d\.\d\d\d)")))
      << err;
}

TEST_F(EngineLoggerTest, LogLevelSilencesTheDefaultLogger) {
  kindling::set_log_level(LogLevel::kWarning);
  ke::Engine trainer = make_trainer();
  EXPECT_FALSE(trainer.logger.is_enabled_for(LogLevel::kInfo));
  EXPECT_EQ(run_two_epochs(trainer), "");
}

// Before initialize, the rank is the launcher's: torchrun's RANK, or mpirun's.
class EngineLoggerRankTest : public EngineLoggerTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(EngineLoggerRankTest, OtherRanksWriteInfoLinesOnlyAtDebug) {
  const std::string prefix = GetParam();
  ::setenv((prefix + "RANK").c_str(), "1", 1);
  ::setenv((prefix + (prefix.empty() ? "WORLD_SIZE" : "SIZE")).c_str(), "2", 1);
  if (!prefix.empty()) {
    ::setenv((prefix + "LOCAL_RANK").c_str(), "1", 1);
    ::setenv((prefix + "LOCAL_SIZE").c_str(), "2", 1);
  }
  kindling::set_log_level(LogLevel::kInfo);
  ke::Engine trainer = make_trainer();
  EXPECT_FALSE(trainer.logger.is_enabled_for(LogLevel::kInfo));
  EXPECT_TRUE(trainer.logger.is_enabled_for(LogLevel::kWarning));
  EXPECT_EQ(run_two_epochs(trainer), "");
  kindling::set_log_level(LogLevel::kDebug);
  const std::string err = run_two_epochs(trainer);
  EXPECT_NE(err.find("trainer run starting with max_epochs=2."), std::string::npos) << err;
  EXPECT_NE(err.find("trainer: Epoch[2] Complete."), std::string::npos) << err;
}

INSTANTIATE_TEST_SUITE_P(Launchers, EngineLoggerRankTest, ::testing::Values("", "OMPI_COMM_WORLD_"),
                         [](const auto& info) { return std::string(info.param[0] ? "mpirun" : "torchrun"); });

TEST_F(EngineLoggerTest, SetupLoggerBecomesTheEnginesLogger) {
  kindling::set_log_level(LogLevel::kOff);  // kindling's own log is not where these lines go
  ke::Engine trainer = make_trainer();
  auto logger = kindling::handlers::setup_logger("Trainer", LogLevel::kInfo, "%(name)s %(levelname)s: %(message)s");
  trainer.logger = logger;
  std::string err = run_two_epochs(trainer);
  EXPECT_NE(err.find("Trainer INFO: trainer run starting with max_epochs=2.\n"), std::string::npos) << err;
  EXPECT_NE(err.find("Trainer INFO: trainer: Epoch[1] Complete. Time taken: "), std::string::npos) << err;
  logger.set_level(LogLevel::kWarning);  // the engine shares the logger
  EXPECT_EQ(run_two_epochs(trainer), "");
}

TEST_F(EngineLoggerTest, OwnLoggerGetsEveryEnabledLineWithItsLevel) {
  ke::Engine trainer = make_trainer();
  std::vector<std::pair<LogLevel, std::string>> lines;
  trainer.logger = ke::EngineLogger([&](LogLevel l, const std::string& m) { lines.emplace_back(l, m); },
                                    [](LogLevel l) { return l >= LogLevel::kInfo; });
  trainer.on(ke::Events::ITERATION_COMPLETED, [](ke::Engine& e) {
    if (e.state().iteration == 4) e.terminate();
  });
  std::vector<int> data{1, 2, 3};
  trainer.run(data, 5);
  std::vector<std::string> texts;
  for (const auto& [level, text] : lines) {
    EXPECT_EQ(level, LogLevel::kInfo) << text;
    texts.push_back(text.substr(0, text.find(" Time taken")));
  }
  const std::vector<std::string> expected{
      "trainer run starting with max_epochs=5.", "trainer: Epoch[1] Complete.",
      "trainer: Terminate signaled. Engine will stop after current iteration is finished.", "trainer run complete."};
  EXPECT_EQ(texts, expected);
}

TEST_F(EngineLoggerTest, ALoggerWithoutFunctionsIsRefused) {
  const std::string message = kindling::testing::error_of<kindling::UsageError>(
      [] { ke::EngineLogger(nullptr, [](LogLevel) { return true; }); });
  EXPECT_NE(message.find("kindling::engine::EngineLogger"), std::string::npos) << message;
  EXPECT_NE(message.find("no write"), std::string::npos) << message;
}

// ignite's MNIST examples: a create_supervised_trainer whose EPOCH_COMPLETED runs a
// create_supervised_evaluator twice (training and validation data). At INFO only the trainer's
// lines show, named "trainer" (ignite prints nothing for the evaluator at its default level);
// at DEBUG the evaluator's show, named "evaluator".
TEST_F(EngineLoggerTest, SupervisedEnginesAreNamedAndTheEvaluatorLogsAtDebug) {
  kindling::set_log_level(LogLevel::kInfo);
  torch::nn::Linear model(2, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  ke::Engine trainer = ke::create_supervised_trainer(
      model, optimizer, [](const at::Tensor& y_pred, const at::Tensor& y) { return (y_pred - y).pow(2).mean(); });
  ke::Engine evaluator = ke::create_supervised_evaluator(model);
  const std::vector<kindling::data::Example> data(3, {at::ones({4, 2}), at::zeros({4, 1})});
  trainer.on(ke::Events::EPOCH_COMPLETED, [&](ke::Engine&) {
    evaluator.run(data);
    evaluator.run(data);
  });
  ::testing::internal::CaptureStderr();
  trainer.run(data, 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::regex epoch_line(R"(Epoch\[\d\] Complete)");
  EXPECT_EQ(std::distance(std::sregex_iterator(err.begin(), err.end(), epoch_line), std::sregex_iterator()), 2) << err;
  EXPECT_NE(err.find("trainer: Epoch[2] Complete."), std::string::npos) << err;
  EXPECT_EQ(err.find("evaluator"), std::string::npos) << err;
  EXPECT_EQ(err.find("Engine"), std::string::npos) << err;
  kindling::set_log_level(LogLevel::kDebug);
  ::testing::internal::CaptureStderr();
  evaluator.run(data);
  const std::string debug = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(debug.find("evaluator: Epoch[1] Complete."), std::string::npos) << debug;
}

}  // namespace
