// kindling-run reads the flight records of a failed attempt (src/supervisor/process/flight_verdict.h):
// real ranks under the real launcher, one of which stops taking part; the summary names the
// collective the others wait in and the rank that never called it or wrote no record, the ranks
// still running are asked for their records before they are stopped, and the files are where it
// says (each attempt in its folder).
#include <gtest/gtest.h>
#include <unistd.h>

#include <kindling/kindling.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "support/files.h"
#include "support/multiprocess.h"
#include "support/terminal.h"

namespace flight_verdict_test {
using kindling::testing::describe;
using kindling::testing::run_command;

// Three all_reduces; then the last rank stops taking part (sleeps until kindling-run stops
// it), and the others give up on collective #4 after the stall period and fail; kindling-run asks
// the sleeping rank for its record (SIGUSR1) before it stops it.
KINDLING_WORKER(flight_stall_under_kindling_run) {
  namespace kd = kindling::dist;
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)).stall_timeout(std::chrono::seconds(2)));
  auto t = at::ones({4});
  for (int i = 0; i < 3; ++i) kd::all_reduce(t);
  if (kd::get_rank() == kd::get_world_size() - 1) std::this_thread::sleep_for(std::chrono::seconds(60));
  kd::all_reduce(t);  // throws: the stall; nobody catches it, so the rank fails
}

TEST(KindlingRunFlightRecords, TheFailureSummarySaysWhoWaitsWhereAndWhoNeverCalledIt) {
  kindling::testing::TempDir base("flight-run");
  const auto r = run_command({KINDLING_RUN_PATH, "--nproc_per_node", "3", kindling::testing::self_path(),
                              "--kindling-worker=flight_stall_under_kindling_run"},
                             {{"KINDLING_FLIGHT_RECORD_DIR", base.path()}}, std::chrono::seconds(90));
  const std::string folder = base.path() + "/attempt0";
  EXPECT_FALSE(r.timed_out) << describe({r});
  EXPECT_NE(r.exit_code, 0) << describe({r});
  EXPECT_NE(r.err.find("  flight records: ranks 0, 1, 2 wrote one in " + folder +
                       "; on the world, collective #4 (all_reduce): ranks 0, 1 started; rank 2 never called it (the "
                       "last collective of rank 2: #3 all_reduce, completed) (torch's analyzer reads them: "
                       "torchfrtrace " +
                       folder + ")\n"),
            std::string::npos)
      << describe({r});
  EXPECT_EQ(kindling::testing::files_in(folder),
            (std::vector<std::string>{"kindling_fr_rank_0", "kindling_fr_rank_1", "kindling_fr_rank_2"}));
  // Every rank ended by its failure or by kindling-run's stop, none by a crash on the way out.
  EXPECT_EQ(r.err.find("SIGSEGV"), std::string::npos) << describe({r});
}

}  // namespace flight_verdict_test

namespace flight_verdict_test {

// Rank 1 fails (exit 3, no record) after three all_reduces while ranks 0 and 2 compute (sleep,
// in no collective, so nothing fails there): kindling-run asks them for their records (SIGUSR1)
// before it stops them, so the summary holds both, every collective complete, and names rank 1
// as the one without.
KINDLING_WORKER(flight_survivors_asked) {
  namespace kd = kindling::dist;
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)).stall_timeout(std::chrono::seconds(60)));
  auto t = at::ones({4});
  for (int i = 0; i < 3; ++i) kd::all_reduce(t);
  if (kd::get_rank() == 1) std::_Exit(3);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::_Exit(0);
}

TEST(KindlingRunFlightRecords, RanksStillRunningWriteTheirRecordsBeforeTheyAreStopped) {
  kindling::testing::TempDir base("flight-run");
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_command({KINDLING_RUN_PATH, "--nproc_per_node", "3", kindling::testing::self_path(),
                              "--kindling-worker=flight_survivors_asked"},
                             {{"KINDLING_FLIGHT_RECORD_DIR", base.path()}}, std::chrono::seconds(90));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string folder = base.path() + "/attempt0";
  EXPECT_FALSE(r.timed_out) << describe({r});
  EXPECT_EQ(r.exit_code, 3) << describe({r});
  // The records asked for (at most 2 s), then SIGTERM: far from the workers' 60 s of sleep.
  EXPECT_LT(seconds, 30) << describe({r});
  EXPECT_NE(r.err.find("  flight records: ranks 0, 2 wrote one in " + folder +
                       "; no record from rank 1 (torch's analyzer reads them: torchfrtrace " + folder + ")\n"),
            std::string::npos)
      << describe({r});
  EXPECT_EQ(kindling::testing::files_in(folder),
            (std::vector<std::string>{"kindling_fr_rank_0", "kindling_fr_rank_2"}));
}

}  // namespace flight_verdict_test

namespace flight_verdict_test {

// The attempt's folder is made for every job; a job whose workers wrote no record removes it,
// and the folders above it that it made.
TEST(KindlingRunFlightRecords, AJobThatWritesNoRecordLeavesNoFolder) {
  kindling::testing::TempDir tmp("flight-tmp");
  const auto r = run_command({KINDLING_RUN_PATH, "--nproc_per_node", "2", HELLO_DIST_PATH},
                             {{"TMPDIR", tmp.path()}, {"KINDLING_FLIGHT_RECORD_DIR", ""}}, std::chrono::seconds(60));
  EXPECT_TRUE(r.ok()) << describe({r});
  for (const std::string& name : kindling::testing::files_in(tmp.path()))
    EXPECT_NE(name, "kindling-flight-records") << "left behind in TMPDIR";
}

}  // namespace flight_verdict_test

namespace flight_verdict_test {

// Rank 1 misbehaves at the third collective (FLIGHT_FAULT): "different" calls all_gather where
// the others call all_reduce (#3); "skip" skips the others' second all_reduce (of 8 floats), so
// that its next one (of 16) meets theirs at #2. However the engine takes it (a hang that the
// stall period ends, an error, or a wrong result), every rank keeps its record (written on the
// failure, or here), waits until all three have (MARK_DIR), and fails; the summary names what
// differs.
KINDLING_WORKER(flight_mismatch_under_kindling_run) {
  namespace kd = kindling::dist;
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)).stall_timeout(std::chrono::seconds(2)));
  const bool skip = std::string(std::getenv("FLIGHT_FAULT")) == "skip";
  auto t = at::ones({4});
  kd::all_reduce(t);
  try {
    if (skip) {
      auto b = at::ones({8}), c = at::ones({16});
      if (kd::get_rank() != 1) kd::all_reduce(b);
      kd::all_reduce(c);
    } else {
      kd::all_reduce(t);
      if (kd::get_rank() == 1)
        kd::all_gather(t);
      else
        kd::all_reduce(t);
    }
    kd::dump_flight_record();
  } catch (const kindling::Error&) {  // the failure wrote the record
  }
  const std::string marks = std::getenv("MARK_DIR");
  std::ofstream(marks + "/" + std::to_string(kd::get_rank())).put('x');
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (kindling::testing::files_in(marks).size() < 3 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::_Exit(1);
}

// Runs the worker with `fault` under kindling-run; checks the summary holds `verdict` and, where
// the tests' Python has torch's analyzer (torch 2.x), that it reports collective #`seq` with
// `error` and `found` (its verdict goes to stderr).
void check_mismatch(const std::string& fault, const std::string& verdict, int seq, const std::string& error,
                    const std::string& found) {
  kindling::testing::TempDir base("flight-run"), marks("flight-marks");
  const auto r =
      run_command({KINDLING_RUN_PATH, "--nproc_per_node", "3", kindling::testing::self_path(),
                   "--kindling-worker=flight_mismatch_under_kindling_run"},
                  {{"KINDLING_FLIGHT_RECORD_DIR", base.path()}, {"MARK_DIR", marks.path()}, {"FLIGHT_FAULT", fault}},
                  std::chrono::seconds(90));
  EXPECT_FALSE(r.timed_out) << describe({r});
  EXPECT_NE(r.exit_code, 0) << describe({r});
  EXPECT_NE(r.err.find("  flight records: ranks 0, 1, 2 wrote one in " + base.path() + "/attempt0; " + verdict),
            std::string::npos)
      << describe({r});
  const auto analyzer = run_command({KINDLING_PYTHON, "-c",
                                     "import sys\n"
                                     "try:\n from torch.distributed.flight_recorder.fr_trace import main\n"
                                     "except ImportError:\n print('no analyzer'); sys.exit(0)\n"
                                     "main(sys.argv[1:])",
                                     base.path() + "/attempt0"},
                                    {}, std::chrono::seconds(120));
  ASSERT_TRUE(analyzer.ok()) << describe({analyzer});
  if (analyzer.out.find("no analyzer") == std::string::npos) {
    EXPECT_NE(analyzer.err.find("Collective sequence number: " + std::to_string(seq) + " has errors"),
              std::string::npos)
        << analyzer.err;
    EXPECT_NE(analyzer.err.find("Error type: " + error), std::string::npos) << analyzer.err;
    EXPECT_NE(analyzer.err.find(found), std::string::npos) << analyzer.err;
  }
}

TEST(KindlingRunFlightRecords, RanksThatCallDifferentCollectivesAreNamed) {
  check_mismatch("different",
                 "on the world, collective #3 (all_reduce): the ranks differ in operation: rank 1 all_gather, ranks 0, "
                 "2 all_reduce",
                 3, "COLLECTIVE_TYPE_MISMATCH", "'all_gather'");
}

TEST(KindlingRunFlightRecords, ARankThatSkipsACollectiveIsNamedWhereItsNextOneMeetsTheOthers) {
  check_mismatch("skip",
                 "on the world, collective #2 (all_reduce): the ranks differ in sizes: rank 1 [[16]], ranks 0, 2 [[8]]",
                 2, "SIZE_OR_SYNTAX_MISMATCH", "input sizes: '[[16]]'");
}

}  // namespace flight_verdict_test
