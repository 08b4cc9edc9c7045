// setup_logger: the level threshold, ignite's format (and its errors), the file (same lines,
// appended, flushed at once), and on 2 ranks the rank tag and who is silenced.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/files.h"
#include "support/errors.h"
#include "kindling/dist/dist.h"
#include "kindling/handlers/loggers/setup_logger.h"
#include "support/multiprocess.h"

namespace {

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
using kindling::LogLevel;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

using kindling::testing::error_of;

TEST(SetupLoggerTest, LevelFiltersLinesInIgnitesDefaultFormat) {
  auto logger = kh::setup_logger("trainer", LogLevel::kWarning);
  EXPECT_EQ(logger.name(), "trainer");
  EXPECT_EQ(logger.level(), LogLevel::kWarning);
  EXPECT_FALSE(logger.silenced());
  EXPECT_FALSE(logger.is_enabled_for(LogLevel::kInfo));
  EXPECT_TRUE(logger.is_enabled_for(LogLevel::kError));
  EXPECT_FALSE(logger.is_enabled_for(LogLevel::kOff));
  ::testing::internal::CaptureStderr();
  logger.debug("debug line");
  logger.info("info line");
  logger.warning("warning line");
  logger.error("error line");
  logger.log(LogLevel::kOff, "never");
  auto copy = logger;  // copies share the threshold
  copy.set_level(LogLevel::kDebug);
  logger.debug("debug after set_level");
  logger.trace("trace line");
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::vector<std::string> lines = lines_of(err);
  ASSERT_EQ(lines.size(), 3u) << err;
  // ignite's "%(asctime)s %(name)s %(levelname)s: %(message)s"; this process has no rank tag.
  const std::regex line_re(R"(^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} trainer ([A-Z]+): (.*)$)");
  const std::vector<std::pair<std::string, std::string>> expected{
      {"WARNING", "warning line"}, {"ERROR", "error line"}, {"DEBUG", "debug after set_level"}};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, line_re)) << lines[i];
    EXPECT_EQ(m[1].str(), expected[i].first);
    EXPECT_EQ(m[2].str(), expected[i].second);
  }
}

TEST(SetupLoggerTest, TheFileGetsTheSameLinesAtOnceAndIsAppendedTo) {
  const kindling::testing::TempDir folder("logger");
  const std::string dir = folder.path(), path = dir + "/logs/run.log";  // logs/ is made
  {
    auto logger = kh::setup_logger("file_test", LogLevel::kInfo, "%(levelname)-8s|%(name)s|%(message)s", path);
    ::testing::internal::CaptureStderr();
    logger.info("first");
    logger.debug("hidden");
    logger.critical("second");
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(err, "INFO    |file_test|first\nCRITICAL|file_test|second\n");
    EXPECT_EQ(read_file(path), err);  // flushed with each line, while the logger is alive
  }
  {
    auto again = kh::setup_logger("again", LogLevel::kInfo, "%(levelname)8s %(message)s 100%% done", path);
    ::testing::internal::CaptureStderr();
    again.warning("third");
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), " WARNING third 100% done\n");
  }
  EXPECT_EQ(read_file(path), "INFO    |file_test|first\nCRITICAL|file_test|second\n WARNING third 100% done\n");
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(SetupLoggerTest, ProcessKeyAndFormatErrors) {
  auto logger = kh::setup_logger("pid", LogLevel::kInfo, "%(process)d:%(message)s");
  ::testing::internal::CaptureStderr();
  logger.info("x");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), std::to_string(::getpid()) + ":x\n");
  const auto format_error = [](const std::string& format) {
    return error_of([&] { kh::setup_logger("bad", LogLevel::kInfo, format); });
  };
  EXPECT_NE(format_error("%(funcName)s %(message)s")
                .find("the keys kindling fills in are asctime, name, levelname, message, process and thread"),
            std::string::npos);
  EXPECT_NE(format_error("100% %(message)s").find("write %% for a literal '%'"), std::string::npos);
  EXPECT_NE(format_error("%(message)").find("without its conversion letter"), std::string::npos);
  EXPECT_NE(format_error("%(message").find("without its ')'"), std::string::npos);
  EXPECT_NE(format_error("%(asctime)30s %(message)s").find("width"), std::string::npos);
  EXPECT_NE(error_of([] {
              kh::setup_logger("bad", LogLevel::kInfo, kh::kDefaultLogFormat, std::string());
            }).find("filepath is an empty string"),
            std::string::npos);
  EXPECT_THROW(kh::setup_logger("bad", LogLevel::kInfo, "%(levelname)s %(bogus)s"), kindling::UsageError);
}

// Before initialize the tag and the default rank come from RANK / WORLD_SIZE, after it from
// the distributed model; an explicit distributed_rank decides who writes.
KINDLING_WORKER(setup_logger_ranks) {
  const std::string rank = std::getenv("RANK"), ws = std::getenv("WORLD_SIZE");
  const std::string dir = std::getenv("KINDLING_TEST_DIR");
  // Under kindling-run's prefix (KINDLING_OUTPUT_RANK_PREFIXED) stderr's lines carry no tag of
  // their own; the file's keep it.
  const std::string tag = std::getenv("KINDLING_OUTPUT_RANK_PREFIXED") ? "" : "[rank " + rank + "/" + ws + "] ";
  ::testing::internal::CaptureStderr();
  auto early = kh::setup_logger("early", LogLevel::kInfo, "%(name)s: %(message)s");
  early.info("before initialize");
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(30)));
  auto logger =
      kh::setup_logger("dist", LogLevel::kInfo, "%(name)s %(levelname)s: %(message)s", dir + "/rank" + rank + ".log");
  logger.info("after initialize");
  auto everyone = kh::setup_logger("everyone", LogLevel::kInfo, "%(name)s: %(message)s", std::nullopt, 0);
  everyone.warning("every rank counts as 0");
  auto nobody = kh::setup_logger("nobody", LogLevel::kInfo, "%(message)s", std::nullopt, 1);
  nobody.set_level(LogLevel::kTrace);  // ignored: a silenced logger has no output
  nobody.error("every rank counts as 1");
  kd::finalize();
  const std::string err = ::testing::internal::GetCapturedStderr();
  std::string expected;
  if (rank == "0") expected = tag + "early: before initialize\n" + tag + "dist INFO: after initialize\n";
  expected += tag + "everyone: every rank counts as 0\n";
  WCHECK(err == expected, << "stderr was: " << err);
  WCHECK(early.silenced() == (rank != "0") && logger.silenced() == (rank != "0"), << "rank " << rank);
  WCHECK(nobody.silenced() && nobody.level() == LogLevel::kOff && !nobody.is_enabled_for(LogLevel::kCritical));
}

TEST(SetupLoggerTest, RankTagAndOnlyRankZeroWrites) {
  for (bool prefixed : {false, true}) {
    const kindling::testing::TempDir dir_folder("logger");
    const std::string dir = dir_folder.path();
    kindling::testing::LaunchOptions opts;
    opts.world_size = 2;
    opts.env["KINDLING_TEST_DIR"] = dir;
    for (int r = 0; r < 2 && prefixed; ++r) opts.rank_env[r] = {{"KINDLING_OUTPUT_RANK_PREFIXED", std::to_string(r) + "/2"}};
    const auto results = kindling::testing::run_workers("setup_logger_ranks", opts);
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
    EXPECT_EQ(read_file(dir + "/rank0.log"), "[rank 0/2] dist INFO: after initialize\n") << "prefixed " << prefixed;
    std::ifstream rank1(dir + "/rank1.log");
    EXPECT_FALSE(rank1.good()) << "rank 1 opened its log file although it is silenced";
    std::system(("rm -rf '" + dir + "'").c_str());
  }
}

}  // namespace
