// The flight recorder (kindling/dist/flight_recorder.h): real ranks write their dumps on
// request, on SIGUSR1 and after a stall, and leave nothing behind when killed mid-dump;
// Python's pickle reads them back and, with torch 2.x, torch's own analyzer (torchfrtrace)
// reads the whole job's dumps and names the rank that never joined
// (tests/dist/check_flight_record.py).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kindling/kindling.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "support/files.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_command;
using kindling::testing::run_workers;

namespace flight_recorder_test {

// The engine's name in the dumps: the analyzer knows gloo's; mpi is written as c10d's.
std::string engine_of(const std::string& backend) { return backend == "gloo" ? "gloo" : "c10d"; }

kindling::testing::RankResult check(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/dist/check_flight_record.py"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, {}, std::chrono::seconds(120));
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Waits up to `seconds` for `path` to appear.
bool appears(const std::string& path, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!exists(path) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return exists(path);
}

}  // namespace flight_recorder_test

// The collectives check_flight_record.py expects (CLEAN there), then a dump on request.
KINDLING_WORKER(flight_clean) {
  kd::initialize(kindling::testing::test_backend());
  auto t = at::ones({4});
  kd::broadcast(t, 0);
  kd::all_reduce(t);
  kd::all_gather(t);
  kd::barrier();
  kd::all_reduce_async(t).wait();
  auto d = at::ones({2, 3}, at::kDouble);
  kd::all_reduce(d);
  const std::string path = kd::dump_flight_record();
  const std::string want = kd::flight_record_folder() + "/kindling_fr_rank_" + std::to_string(kd::get_rank());
  WCHECK(path == want, << "dumped to " << path << ", expected " << want);
  kd::barrier();  // after the dump: not in it
  kd::finalize();
}

class FlightRecorderTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(FlightRecorderTest, DumpsEveryCollectiveInTorchsLayout) {
  kindling::testing::TempDir dir("flight");
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  opts.deadline = std::chrono::seconds(120);
  opts.env["KINDLING_FLIGHT_RECORD_DIR"] = dir.path();
  auto results = run_workers("flight_clean", opts);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << describe(results);
  const auto checked =
      flight_recorder_test::check({"clean", dir.path(), std::to_string(opts.world_size),
                                   flight_recorder_test::engine_of(opts.backend)});
  EXPECT_TRUE(checked.ok()) << checked.out << checked.err;
  std::cout << checked.out;
}

INSTANTIATE_TEST_SUITE_P(Backends, FlightRecorderTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

// Three all_reduces; then the last rank dumps on SIGUSR1 and stops taking part while the
// others wait in #4 until the stall period (2 s) ends it for them; they dump on that failure.
KINDLING_WORKER(flight_stopped_rank) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)).stall_timeout(std::chrono::seconds(2)));
  const int stopped = kd::get_world_size() - 1;
  const std::string folder = kd::flight_record_folder();
  auto t = at::ones({4});
  for (int i = 0; i < 3; ++i) kd::all_reduce(t);
  if (kd::get_rank() == stopped) {
    ::raise(SIGUSR1);
    WCHECK(flight_recorder_test::appears(folder + "/kindling_fr_rank_" + std::to_string(stopped), 10),
           << "SIGUSR1 wrote no dump in 10 s");
    // Out of the job until every other rank has dumped on its failure (at most 30 s).
    for (int r = 0; r < stopped; ++r) flight_recorder_test::appears(folder + "/kindling_fr_rank_" + std::to_string(r), 30);
    std::_Exit(0);
  }
  try {
    kd::all_reduce(t);
    WCHECK(false, << "all_reduce #4 completed without the stopped rank");
  } catch (const kindling::TimeoutError& e) {
    WCHECK(std::string(e.what()).find("stalled: rank " + std::to_string(stopped)) != std::string::npos, << e.what());
  }
  WCHECK(flight_recorder_test::exists(folder + "/kindling_fr_rank_" + std::to_string(kd::get_rank())),
         << "no dump after the stall");
  std::_Exit(0);  // the group is broken: nothing to finalize with the stopped rank
}

TEST(FlightRecorderStall, TheAnalyzerNamesTheRankThatNeverJoined) {
  kindling::testing::TempDir dir("flight");
  LaunchOptions opts;
  opts.world_size = 3;
  opts.deadline = std::chrono::seconds(90);
  opts.env["KINDLING_FLIGHT_RECORD_DIR"] = dir.path();
  auto results = run_workers("flight_stopped_rank", opts);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << describe(results);
  const auto checked = flight_recorder_test::check({"missing", dir.path(), "3", "gloo", "2", "4"});
  EXPECT_TRUE(checked.ok()) << checked.out << checked.err;
  std::cout << checked.out;
}

// KINDLING_FLIGHT_RECORDER=0 turns it off (no file); a malformed value is refused at initialize.
KINDLING_WORKER(flight_settings) {
  const std::string folder = kd::flight_record_folder();
  if (std::string(std::getenv("KINDLING_FLIGHT_RECORDER")) == "many") {
    try {
      kd::initialize("gloo");
      WCHECK(false, << "initialize accepted KINDLING_FLIGHT_RECORDER=many");
    } catch (const kindling::UsageError& e) {
      WCHECK(std::string(e.what()).find("KINDLING_FLIGHT_RECORDER='many'") != std::string::npos, << e.what());
    }
    return;
  }
  kd::initialize("gloo");
  auto t = at::ones({4});
  kd::all_reduce(t);
  WCHECK(kd::dump_flight_record().empty());
  kd::barrier();
  WCHECK(!flight_recorder_test::exists(folder), << folder << " was made with the recorder off");
  kd::finalize();
}

TEST(FlightRecorderSettings, ZeroTurnsItOffAndAMalformedCountIsRefused) {
  for (const char* value : {"0", "many"}) {
    kindling::testing::TempDir dir("flight");
    LaunchOptions opts;
    opts.env["KINDLING_FLIGHT_RECORD_DIR"] = dir.path() + "/records";
    opts.env["KINDLING_FLIGHT_RECORDER"] = value;
    auto results = run_workers("flight_settings", opts);
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << value << ": " << describe(results);
  }
}

// An exception nobody catches ends the program (exit code 1 for a kindling::Error) and writes
// the record first.
KINDLING_WORKER(flight_uncaught) {
  kd::initialize("gloo");
  auto t = at::ones({4});
  kd::all_reduce(t);
  kd::all_reduce(t);
  // Thrown where nothing catches it (the test harness catches what a worker throws).
  std::thread([] { throw kindling::UsageError("a mistake nobody catches"); }).join();
}

TEST(FlightRecorderUncaught, AnExceptionThatEndsTheProgramWritesTheRecord) {
  kindling::testing::TempDir dir("flight");
  LaunchOptions opts;
  opts.env["KINDLING_FLIGHT_RECORD_DIR"] = dir.path();
  auto results = run_workers("flight_uncaught", opts);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << describe(results);
    EXPECT_NE(r.err.find("an uncaught exception ends the program) written to " + dir.path() + "/kindling_fr_rank_" +
                         std::to_string(r.rank)),
              std::string::npos)
        << describe(results);
  }
  EXPECT_EQ(kindling::testing::files_in(dir.path()),
            (std::vector<std::string>{"kindling_fr_rank_0", "kindling_fr_rank_1"}));
}

// A rank killed while it writes its record (here by SIGXFSZ: a file size limit below the
// record's size, deterministic where a launcher's SIGKILL is a race) leaves nothing but the
// records written before in the folder torch's analyzer is pointed at: neither a part of the
// new record nor a temporary file.
KINDLING_WORKER(flight_killed_mid_dump) {
  kd::initialize("gloo");
  auto t = at::ones({4});
  for (int i = 0; i < 50; ++i) kd::all_reduce(t);  // a record of several kilobytes
  kd::barrier();
  const std::string path = kd::dump_flight_record();
  WCHECK(kd::dump_flight_record() == path);  // replaces the first
  struct rlimit limit {};
  limit.rlim_cur = limit.rlim_max = 1024;
  WCHECK(::setrlimit(RLIMIT_FSIZE, &limit) == 0, << "setrlimit: " << std::strerror(errno));
  kd::dump_flight_record();  // SIGXFSZ ends the process inside the write
  std::fprintf(stderr, "the dump was written whole under a 1024-byte file size limit\n");
  std::_Exit(3);
}

TEST(FlightRecorderKilled, ARankKilledWhileWritingLeavesNothingInTheFolder) {
  kindling::testing::TempDir dir("flight");
  const int probe = ::open(dir.path().c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (probe < 0)
    GTEST_SKIP() << dir.path() << " has no O_TMPFILE (" << std::strerror(errno)
                 << "): the dump uses a named temporary there";
  ::close(probe);
  LaunchOptions opts;
  opts.env["KINDLING_FLIGHT_RECORD_DIR"] = dir.path();
  auto results = run_workers("flight_killed_mid_dump", opts);
  for (const auto& r : results) EXPECT_EQ(r.signal, SIGXFSZ) << describe(results);
  auto files = kindling::testing::files_in(dir.path());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"kindling_fr_rank_0", "kindling_fr_rank_1"}));
  for (const auto& name : files) {  // the second dump, whole (a part would stop at the 1 KiB limit)
    struct stat st {};
    EXPECT_EQ(::stat((dir.path() + "/" + name).c_str(), &st), 0) << name;
    EXPECT_GT(st.st_size, 1024) << name;
  }
}
