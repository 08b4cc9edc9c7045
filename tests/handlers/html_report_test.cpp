// HtmlReport: the page holds every logged value (checked by tests/handlers/check_report.py,
// an independent reader, against the JSON-lines logger fed by the same handlers), escapes
// text, is replaced whole on each render, drops values after close() with one warning, and is inert on
// ranks other than 0. The page's look is checked in Chromium by the cifar10 example's test.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/loggers/html_report.h"
#include "kindling/handlers/loggers/json_logger.h"
#include "support/files.h"
#include "support/errors.h"
#include "support/multiprocess.h"

namespace {

namespace fs = std::filesystem;
namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST(HtmlReportTest, HoldsWhatTheJsonLoggerGotFromTheSameHandlers) {
  const kindling::testing::TempDir dir_folder("report");
  const fs::path dir = dir_folder.path();
  kh::HtmlReport report((dir / "sub" / "report.html").string(), "net <on> \"data\" & more");
  report.set_config({{"learning_rate", "0.1"}, {"note", "</script><b>"}});
  kh::JsonLogger json((dir / "scalars.jsonl").string());
  Engine trainer([](Engine& e, const int& b) -> Value { return b == 3 ? std::nan("") : 1.0 / (b + e.state().epoch); });
  Engine evaluator([](Engine&, const int&) -> Value { return 0.0; });
  evaluator.on(Events::COMPLETED, [](Engine& e) { e.state().metrics["Accuracy"] = 0.5 + 0.1 * e.state().epoch; });
  for (kh::BaseLogger* logger : std::initializer_list<kh::BaseLogger*>{&report, &json}) {
    logger->attach_output_handler(trainer, Events::ITERATION_COMPLETED, "training", {}, [](const Value& out) {
      return std::map<std::string, double>{{"batch loss", out.number()}};
    });
    logger->attach_output_handler(evaluator, Events::COMPLETED, "test", {"Accuracy"}, {},
                                  kh::global_step_from_engine(trainer));
  }
  trainer.on(Events::EPOCH_COMPLETED, [&](Engine& t) {
    std::vector<int> one{0};
    evaluator.run(one);
    report.render("after epoch " + std::to_string(t.state().epoch));
  });
  std::vector<int> data{1, 2, 3, 4};
  trainer.run(data, 3);
  json.close();
  report.close();

  const std::string page = read(dir / "sub" / "report.html");
  EXPECT_NE(page.find("net &lt;on&gt; &quot;data&quot; &amp; more"), std::string::npos);
  EXPECT_EQ(page.find("<b>"), std::string::npos) << "configuration text must be escaped";
  EXPECT_NE(page.find("after epoch 3"), std::string::npos);
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir / "sub")) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u) << "a temporary file was left beside the page";
  auto r = kindling::testing::run_command(
      {KINDLING_PYTHON, std::string(KINDLING_SOURCE_DIR) + "/tests/handlers/check_report.py",
       (dir / "sub" / "report.html").string(), (dir / "scalars.jsonl").string(), "--no-screenshot"});
  EXPECT_EQ(r.exit_code, 0) << kindling::testing::describe({r});
  EXPECT_NE(r.out.find("15 records"), std::string::npos) << r.out;  // 12 losses (one NaN) + 3 accuracies

  // After close(): dropped with one warning (not thrown), and not on the page.
  ::testing::internal::CaptureStderr();
  report.add_scalar("test", "Accuracy", 1.0, 97);
  report.add_scalar("test", "Accuracy", 1.0, 98);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(kindling::testing::occurrences(err, "was logged after close()"), 1) << err;
  EXPECT_NE(err.find("HtmlReport: 'test/Accuracy' was logged after close()"), std::string::npos) << err;
  report.render();
  EXPECT_EQ(read(dir / "sub" / "report.html").find("\"step\":97"), std::string::npos);
  fs::remove_all(dir);
}

TEST(HtmlReportTest, OnlyRankZeroWrites) {
  const kindling::testing::TempDir dir_folder("report");
  const fs::path dir = dir_folder.path();
  // Rank 1 of 2 by the launcher's variables (RANK alone is an incomplete environment, refused).
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  {
    kh::HtmlReport report((dir / "report.html").string(), "rank 1");
    EXPECT_FALSE(report.active());
    report.add_scalar("test", "Accuracy", 0.5, 1);
    report.render();
  }
  ::unsetenv("WORLD_SIZE");
  EXPECT_NE(kindling::testing::error_of([&] { kh::HtmlReport((dir / "report.html").string(), "rank 1"); })
                .find("RANK is set (1) but WORLD_SIZE is not"),
            std::string::npos);
  ::unsetenv("RANK");
  EXPECT_FALSE(fs::exists(dir / "report.html"));
  EXPECT_NE(kindling::testing::error_of([] { kh::HtmlReport("", "x"); }).find("path is an empty string"),
            std::string::npos);
  fs::remove_all(dir);
}
