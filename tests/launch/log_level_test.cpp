// KINDLING_LOG_LEVEL, as a launched program meets it: the library's messages filtered by level.
#include <gtest/gtest.h>

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

}  // namespace
