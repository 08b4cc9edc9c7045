// kindling's log: level names, the threshold, the rank tag, one line per call.
#include <gtest/gtest.h>
#include <kindling/kindling.h>

#include <stdlib.h>

#include <cstdlib>
#include <string>

#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::LogLevel;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

// Restores the threshold a test changed.
class LevelGuard {
 public:
  LevelGuard() : saved_(kindling::log_level()) {}
  ~LevelGuard() { kindling::set_log_level(saved_); }

 private:
  LogLevel saved_;
};

TEST(LogTest, LevelNamesParseAndBadNamesSayWhatIsAccepted) {
  EXPECT_EQ(kindling::log_level_from_string("TRACE"), LogLevel::kTrace);
  EXPECT_EQ(kindling::log_level_from_string("warn"), LogLevel::kWarning);
  EXPECT_EQ(kindling::log_level_from_string("Warning"), LogLevel::kWarning);
  EXPECT_EQ(kindling::log_level_from_string("off"), LogLevel::kOff);
  for (auto level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError,
                     LogLevel::kCritical, LogLevel::kOff}) {
    EXPECT_EQ(kindling::log_level_from_string(kindling::to_string(level)), level);
  }
  try {
    kindling::log_level_from_string("loud");
    FAIL() << "no error for 'loud'";
  } catch (const kindling::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "'loud' is not a log level; use trace, debug, info, warning, error, critical or off"),
              std::string::npos)
        << e.what();
  }
}

TEST(LogTest, ThresholdDropsLowerLevelsAndEachCallIsOneLine) {
  LevelGuard guard;
  kindling::set_log_level(LogLevel::kWarning);
  ::testing::internal::CaptureStderr();
  kindling::log(LogLevel::kInfo, "info line");
  kindling::log(LogLevel::kWarning, "warning line");
  kindling::log(LogLevel::kError, "error line");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "warning line\nerror line\n");
  kindling::set_log_level(LogLevel::kOff);
  ::testing::internal::CaptureStderr();
  kindling::log(LogLevel::kCritical, "critical line");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// Before initialize the tag is the launcher's by detect_launch_environment's precedence (here
// mpirun's variables, which the tag once ignored); inconsistent variables (RANK without
// WORLD_SIZE) give no tag, and the line is still written.
TEST(LogTest, BeforeInitializeTheTagIsTheLaunchersRank) {
  LevelGuard guard;
  kindling::set_log_level(LogLevel::kInfo);
  for (const char* name :
       {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_JOB_ID", "HOROVOD_RANK"}) {
    ASSERT_EQ(std::getenv(name), nullptr) << name << " is set in the test's environment";
  }
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  ::testing::internal::CaptureStderr();
  kindling::log(LogLevel::kWarning, "under mpirun");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::setenv("RANK", "1", 1);
  kindling::log(LogLevel::kWarning, "RANK alone");
  ::unsetenv("RANK");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "[rank 1/2] under mpirun\nRANK alone\n");
}

// Before initialize the tag comes from RANK / WORLD_SIZE (torchrun's, as the test's launcher
// sets them), after it from the model.
KINDLING_WORKER(log_rank_tag) {
  const std::string rank = std::getenv("RANK"), ws = std::getenv("WORLD_SIZE");
  ::testing::internal::CaptureStderr();
  kindling::log(LogLevel::kWarning, "before initialize");
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(30)));
  kindling::log(LogLevel::kWarning, "after initialize");
  kd::finalize();
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string tag = "[rank " + rank + "/" + ws + "] ";
  WCHECK(err == tag + "before initialize\n" + tag + "after initialize\n", << "stderr was: " << err);
}

TEST(LogTest, LinesOfARankAreTaggedWithIt) {
  LaunchOptions opts;
  opts.world_size = 2;
  auto results = run_workers("log_rank_tag", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

}  // namespace
