// kindling-run reads the flight records of a failed attempt (src/supervisor/flight_verdict.h):
// real ranks under the real launcher, one of which stops taking part; the summary names the
// collective the others wait in and the rank that wrote no record, and the files are where it
// says (each attempt in its folder).
#include <gtest/gtest.h>
#include <unistd.h>

#include <kindling/kindling.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/files.h"
#include "support/multiprocess.h"
#include "support/terminal.h"

namespace flight_verdict_test {
using kindling::testing::describe;
using kindling::testing::run_command;

// Three all_reduces; then the last rank stops taking part (sleeps until kindling-run stops
// it), and the others give up on collective #4 after the stall period and fail.
KINDLING_WORKER(flight_stall_under_kindling_run) {
  namespace kd = kindling::dist;
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)).stall_timeout(std::chrono::seconds(2)));
  auto t = at::ones({4});
  for (int i = 0; i < 3; ++i) kd::all_reduce(t);
  if (kd::get_rank() == kd::get_world_size() - 1) std::this_thread::sleep_for(std::chrono::seconds(60));
  kd::all_reduce(t);  // throws: the stall; nobody catches it, so the rank fails
}

TEST(KindlingRunFlightRecords, TheFailureSummarySaysWhoWaitsWhereAndWhoWroteNothing) {
  kindling::testing::TempDir base("flight-run");
  const auto r = run_command({KINDLING_RUN_PATH, "--nproc_per_node", "3", kindling::testing::self_path(),
                              "--kindling-worker=flight_stall_under_kindling_run"},
                             {{"KINDLING_FLIGHT_RECORD_DIR", base.path()}}, std::chrono::seconds(90));
  const std::string folder = base.path() + "/attempt0";
  EXPECT_FALSE(r.timed_out) << describe({r});
  EXPECT_NE(r.exit_code, 0) << describe({r});
  EXPECT_NE(r.err.find("  flight records: ranks 0, 1 wrote one in " + folder +
                       "; on the world, ranks 0, 1 wait in collective #4 (all_reduce); no record from rank 2 "
                       "(torch's analyzer reads them: torchfrtrace " + folder + ")\n"),
            std::string::npos)
      << describe({r});
  EXPECT_EQ(kindling::testing::files_in(folder),
            (std::vector<std::string>{"kindling_fr_rank_0", "kindling_fr_rank_1"}));
}

}  // namespace flight_verdict_test

namespace flight_verdict_test {

// The attempt's folder is made for every job; a job whose workers wrote no record removes it,
// and the folders above it that it made.
TEST(KindlingRunFlightRecords, AJobThatWritesNoRecordLeavesNoFolder) {
  kindling::testing::TempDir tmp("flight-tmp");
  const auto r = run_command({KINDLING_RUN_PATH, "--nproc_per_node", "2", HELLO_DIST_PATH}, {{"TMPDIR", tmp.path()}},
                             std::chrono::seconds(60));
  EXPECT_TRUE(r.ok()) << describe({r});
  for (const std::string& name : kindling::testing::files_in(tmp.path()))
    EXPECT_NE(name, "kindling-flight-records") << "left behind in TMPDIR";
}

}  // namespace flight_verdict_test
