// KINDLING_LOG_LEVEL, as a launched program meets it: the library's messages filtered by level;
// and the rank tag of its lines under kindling-run (one tag per line, the relay's).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "support/multiprocess.h"

namespace {

using kindling::testing::describe;

// KINDLING_LOG_LEVEL filters what the library says: three ranks with LOCAL_WORLD_SIZE=2 make
// every rank warn about uneven nodes, tagged with its rank; at level error hello_dist's
// stderr is empty and its stdout unchanged.
TEST(Logging, LogLevelErrorLeavesHelloDistStderrEmpty) {
  kindling::testing::LaunchOptions o;
  o.world_size = 3;
  for (int r = 0; r < 3; ++r) o.commands[r] = {HELLO_DIST_PATH};
  o.env = {{"LOCAL_WORLD_SIZE", "2"}};
  o.rank_env[2] = {{"LOCAL_RANK", "0"}};
  auto loud = kindling::testing::run_workers("", o);
  for (const auto& r : loud) ASSERT_TRUE(r.ok()) << describe(loud);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string line =
        "[rank " + std::to_string(rank) + "/3] kindling::dist: warning: world size 3 is not a multiple of 2";
    EXPECT_NE(loud[static_cast<std::size_t>(rank)].err.find(line), std::string::npos) << describe(loud);
  }
  o.env["KINDLING_LOG_LEVEL"] = "error";
  auto quiet = kindling::testing::run_workers("", o);
  for (std::size_t i = 0; i < quiet.size(); ++i) {
    EXPECT_TRUE(quiet[i].ok()) << describe(quiet);
    EXPECT_EQ(quiet[i].err, "") << describe(quiet);
    EXPECT_EQ(quiet[i].out, loud[i].out);
  }
}

// Under kindling-run every line carries one rank tag: the relay's "[rank<r>]: ", not kindling's
// "[rank r/w] " after it (issue 62). With --no_prefix kindling's own tag is the one. A misspelt
// kindling variable makes every rank warn in initialize().
TEST(Logging, KindlingRunLinesCarryOneRankTag) {
  const std::map<std::string, std::string> misspelt = {{"KINDLING_STALL_TIMEOT", "5"}};
  const std::string warning = "kindling::dist::initialize: warning: KINDLING_STALL_TIMEOT";
  auto prefixed = kindling::testing::run_command({KINDLING_RUN_PATH, "--nproc_per_node", "2", HELLO_DIST_PATH}, misspelt);
  ASSERT_TRUE(prefixed.ok()) << describe({prefixed});
  for (const std::string rank : {"0", "1"}) {
    EXPECT_NE(prefixed.err.find("[rank" + rank + "]: " + warning), std::string::npos) << describe({prefixed});
  }
  EXPECT_EQ(prefixed.err.find("[rank 0/2]"), std::string::npos) << describe({prefixed});
  EXPECT_EQ(prefixed.err.find("[rank 1/2]"), std::string::npos) << describe({prefixed});
  auto plain = kindling::testing::run_command(
      {KINDLING_RUN_PATH, "--nproc_per_node", "2", "--no_prefix", HELLO_DIST_PATH}, misspelt);
  ASSERT_TRUE(plain.ok()) << describe({plain});
  for (const std::string rank : {"0", "1"})
    EXPECT_NE(plain.err.find("[rank " + rank + "/2] " + warning), std::string::npos) << describe({plain});
}

}  // namespace
