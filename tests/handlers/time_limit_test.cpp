// TimeLimit: one process stops once its budget is past, at an iteration the sleeps account
// for (bounds that only the guaranteed minimum sleep decides, never a maximum duration);
// check_every; and 2 or 3 real ranks whose clocks run very differently stop at the same
// iteration, decided by the slowest.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/time_limit.h"
#include "support/errors.h"
#include "support/multiprocess.h"

namespace {

namespace kh = kindling::handlers;
namespace kd = kindling::dist;
using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;
using LimitClock = std::chrono::steady_clock;

// An engine whose every iteration sleeps `pause`.
Engine sleepy_engine(std::chrono::milliseconds pause) {
  return Engine([pause](Engine&, const int&) -> Value {
    std::this_thread::sleep_for(pause);
    return 0.0;
  });
}

TEST(TimeLimitTest, StopsAtTheFirstIterationPastTheLimit) {
  const LimitClock::time_point before = LimitClock::now();
  auto limit = std::make_shared<kh::TimeLimit>(0.2);
  Engine trainer = sleepy_engine(std::chrono::milliseconds(20));
  std::vector<double> elapsed;  // the handler's clock just before each of its checks
  trainer.on(Events::ITERATION_COMPLETED, [&] { elapsed.push_back(limit->elapsed()); });
  limit->attach(trainer);
  bool completed = false;
  trainer.on(Events::COMPLETED, [&] { completed = true; });
  ::testing::internal::CaptureStderr();
  trainer.run(std::vector<int>(1000, 0), 1);
  const std::string log = ::testing::internal::GetCapturedStderr();
  const double took = std::chrono::duration<double>(LimitClock::now() - before).count();

  const int64_t n = trainer.state().iteration;
  EXPECT_TRUE(completed);  // terminate(): TERMINATE, then COMPLETED
  EXPECT_GT(took, 0.2);    // never before the limit
  // Each iteration sleeps at least 20 ms, so at iteration 11 at least 0.22 s had passed: the stop
  // comes at 11 at the latest, however slow the machine. At iteration n - 1 the clock was within it.
  EXPECT_GE(n, 1);
  EXPECT_LE(n, 11);
  ASSERT_EQ(elapsed.size(), static_cast<std::size_t>(n));
  if (n >= 2) EXPECT_LE(elapsed[n - 2], 0.2);
  EXPECT_NE(log.find("the time limit of 0.2 s is reached"), std::string::npos) << log;
  EXPECT_NE(log.find("stopping Engine at iteration " + std::to_string(n)), std::string::npos) << log;
}

TEST(TimeLimitTest, ChecksEveryKCallsAndRefusesBadArguments) {
  auto limit = std::make_shared<kh::TimeLimit>(0.05, kh::TimeLimitOptions().check_every(4));
  Engine trainer = sleepy_engine(std::chrono::milliseconds(10));
  limit->attach(trainer);
  trainer.run(std::vector<int>(1000, 0), 1);
  const int64_t n = trainer.state().iteration;
  EXPECT_EQ(n % 4, 0) << n;
  EXPECT_LE(n, 8);  // 0.05 s are past by iteration 6, checked at 8

  EXPECT_NE(error_of<UsageError>([] { kh::TimeLimit(0); }).find("limit_sec should be a positive"), std::string::npos);
  EXPECT_THROW(kh::TimeLimit(-5), UsageError);
  EXPECT_THROW(kh::TimeLimit(std::numeric_limits<double>::quiet_NaN()), UsageError);
  EXPECT_NE(error_of<UsageError>([] {
              kh::TimeLimit(10, kh::TimeLimitOptions().check_every(0));
            }).find("check_every should be >= 1, got 0; pass 1 to check at every call"),
            std::string::npos);
  const kh::TimeLimit every3(10, kh::TimeLimitOptions().check_every(3));
  EXPECT_EQ(every3.check_every(), 3);
  EXPECT_EQ(every3.limit_sec(), 10);
  EXPECT_EQ(kh::TimeLimit().limit_sec(), 28800);  // ignite's default: 8 hours
  kh::TimeLimit on_stack(1);
  EXPECT_NE(error_of<UsageError>([&] { on_stack.attach(trainer); }).find("std::make_shared"), std::string::npos);
}

// The last rank sleeps 25 ms per iteration, the others 1 ms: alone they would run about 500
// iterations within the 0.5 s limit, the last rank about 20.
KINDLING_WORKER(time_limit_ranks_agree) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const bool slow = kd::get_rank() == kd::get_world_size() - 1;
  auto limit = std::make_shared<kh::TimeLimit>(0.5);
  Engine trainer = sleepy_engine(std::chrono::milliseconds(slow ? 25 : 1));
  limit->attach(trainer);
  trainer.run(std::vector<int>(2000, 0), 1);
  std::printf("FINAL %lld\n", static_cast<long long>(trainer.state().iteration));
  std::fflush(stdout);
  kd::finalize();
}

TEST(TimeLimitTest, RanksWithDifferentClocksStopAtTheSameIteration) {
  for (const auto& [backend, ws] : kindling::testing::cpu_backend_world_sizes({2, 3})) {
    kindling::testing::LaunchOptions opts;
    opts.backend = backend;
    opts.world_size = ws;
    const auto results = kindling::testing::run_workers("time_limit_ranks_agree", opts);
    std::set<long long> finals;
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << kindling::testing::describe(results);
      const auto at = r.out.find("FINAL ");
      ASSERT_NE(at, std::string::npos) << r.out;
      finals.insert(std::stoll(r.out.substr(at + 6)));
    }
    ASSERT_EQ(finals.size(), 1u) << backend << " " << ws << " ranks:\n" << kindling::testing::describe(results);
    // The slow rank is past 0.5 s by iteration 21 (21 x 25 ms); the fast ones stop with it.
    EXPECT_GE(*finals.begin(), 1);
    EXPECT_LE(*finals.begin(), 21) << backend << " " << ws << " ranks";
  }
}

}  // namespace
