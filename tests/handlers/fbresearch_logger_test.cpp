// FBResearchLogger (kindling/handlers/loggers/fbresearch_logger.h): the lines of a scripted run
// equal ignite 0.5.5's FBResearchLogger on the same run (tests/handlers/ignite_fbresearch.py,
// where the build's Python has it: the LibTorch 2.15 venv), measured times masked; the field
// formats (Python's timedelta text, ignite's output formatting) worked by hand; misuse refused.
#include <gtest/gtest.h>

#include <torch/optim/sgd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/loggers/fbresearch_logger.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace fbresearch_logger_test {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

// Measured times replaced: "0.0012 s" -> "T s", "0:00:03" -> "H:MM:SS".
std::string masked(const std::string& line) {
  static const std::regex seconds("[0-9]+\\.[0-9]{4} s"),
      clock("-?[0-9]+( days?,)? [0-9]+:[0-9]{2}:[0-9]{2}|[0-9]+:[0-9]{2}:[0-9]{2}");
  return std::regex_replace(std::regex_replace(line, seconds, "T s"), clock, "H:MM:SS");
}

// ignite_fbresearch.py's two runs, logged by kindling to `path`.
void run_like_ignite(const std::string& path) {
  auto logger = kh::setup_logger("fb", kindling::LogLevel::kInfo, "%(message)s", path, 0);
  std::vector<at::Tensor> w{at::zeros({1}).requires_grad_(), at::zeros({1}).requires_grad_()};
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{w[0]}, std::make_unique<torch::optim::SGDOptions>(0.001));
  groups.emplace_back(std::vector<at::Tensor>{w[1]}, std::make_unique<torch::optim::SGDOptions>(0.02));
  torch::optim::SGD two(groups, torch::optim::SGDOptions(0.001));
  torch::optim::SGD one(std::vector<at::Tensor>{w[0]}, torch::optim::SGDOptions(0.1));
  const auto make = [] {
    Engine engine([](Engine& e, const int&) {
      return Value::named(
          {{"total_loss", at::scalar_tensor(1.0 / static_cast<double>(e.state().iteration), at::kDouble)}});
    });
    engine.on(Events::ITERATION_STARTED,
              [](Engine& e) { e.state().attributes["alpha"] = static_cast<double>(e.state().iteration) / 4; });
    return engine;
  };
  Engine first = make();
  kh::FBResearchLogger(logger, "  ", true).attach(first, "Train", 2, {}, {"alpha", "beta"}, &two);
  first.run(std::vector<int>(5, 0), 2);
  Engine second = make();
  kh::FBResearchLogger(logger).attach(second, "Train", 2, {}, {}, &one);  // the object may go first
  second.run(std::vector<int>(5, 0), 1);
}

TEST(FBResearchLoggerTest, LinesEqualIgnite055) {
  const auto r =
      kindling::testing::run_command({KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/handlers/ignite_fbresearch.py"});
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  ASSERT_TRUE(r.ok()) << kindling::testing::describe({r});
  kindling::testing::TempDir dir("fbresearch");
  run_like_ignite(dir.path() + "/lines.log");
  std::ifstream file(dir.path() + "/lines.log");
  std::vector<std::string> mine, ignite;
  for (std::string line; std::getline(file, line);) mine.push_back(masked(line));
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) {
    if (line.rfind("IGNITE ", 0) != 0) ignite.push_back(masked(line));
  }
  ASSERT_EQ(mine.size(), ignite.size()) << r.out;
  for (std::size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], ignite[i]) << "line " << i + 1;
}

TEST(FBResearchLoggerTest, FieldsAreWrittenAsPythonAndIgniteWriteThem) {
  EXPECT_EQ(kh::FBResearchLogger::timedelta_text(5.9), "0:00:05");
  EXPECT_EQ(kh::FBResearchLogger::timedelta_text(3723), "1:02:03");
  EXPECT_EQ(kh::FBResearchLogger::timedelta_text(86400), "1 day, 0:00:00");
  EXPECT_EQ(kh::FBResearchLogger::timedelta_text(2 * 86400 + 61), "2 days, 0:01:01");
  EXPECT_EQ(kh::FBResearchLogger::timedelta_text(-5), "-1 day, 23:59:55");
  using Fields = std::vector<std::string>;
  EXPECT_EQ(kh::FBResearchLogger::output_fields(Value(0.25)), Fields{"0.2500"});
  EXPECT_EQ(kh::FBResearchLogger::output_fields(Value::named({{"a", at::tensor({1.0, 2.0})}, {"b", at::ones({2, 3})}})),
            (Fields{"a: [1.0000, 2.0000]", "b: Shape[2, 3]"}));
  EXPECT_EQ(kh::FBResearchLogger::output_fields(Value({at::scalar_tensor(1.5), at::arange(12)})),
            Fields{"1.5000, [0.0000, 1.0000, 2.0000, 3.0000, 4.0000, 5.0000, 6.0000, 7.0000, 8.0000, 9.0000, ...]"});
  EXPECT_EQ(kh::FBResearchLogger::output_fields(Value()), Fields{});
  Engine engine([](Engine&, const int&) { return Value(1.0); });
  auto logger = kh::setup_logger("fb", kindling::LogLevel::kInfo, "%(message)s", std::nullopt, 1);  // silenced
  EXPECT_NE(kindling::testing::error_of([&] {
              kh::FBResearchLogger(logger).attach(engine, "Train", 0);
            }).find("every must be at least 1, got 0"),
            std::string::npos);
}

}  // namespace fbresearch_logger_test
