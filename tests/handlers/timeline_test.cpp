// The Timeline handler in one process (kindling/handlers/profilers/timeline.h): which iterations
// it records, the engine's spans (handlers by name, data, process function) and the user's own
// (kindling::timeline::Span), the files (JSON that Python's json module reads), the bound on
// events, and the misuse errors. tests/dist/timeline_test.cpp runs it on real ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/profilers/timeline.h"
#include "kindling/timeline.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace timeline_unit_test {

namespace kh = kindling::handlers;
namespace kt = kindling::timeline;
using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;

struct LogLoss {  // a handler with a readable name
  void operator()(Engine&) const { std::this_thread::sleep_for(std::chrono::milliseconds(1)); }
};

Engine sleeping_engine() {
  return Engine([](Engine&, const kindling::data::Example&) -> Value {
    kt::Span span("augment", kt::Lane::kStep);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return Value(1.0);
  });
}

std::vector<kindling::data::Example> data(int n) {
  return std::vector<kindling::data::Example>(static_cast<std::size_t>(n), kindling::data::Example{});
}

int count(const kh::RankTimeline& r, const std::string& name, kt::Lane lane) {
  int n = 0;
  for (const auto& e : r.events) n += e.name == name && e.lane == lane;
  return n;
}

TEST(TimelineTest, RecordsTheRangeOnlyWithEveryPartNamed) {
  kindling::testing::TempDir dir("timeline");
  Engine trainer = sleeping_engine();
  trainer.on(Events::ITERATION_COMPLETED, LogLoss());
  auto timeline = std::make_shared<kh::Timeline>(
      kh::TimelineOptions().folder(dir.path() + "/t").first_iteration(2).last_iteration(3));
  timeline->attach(trainer);
  trainer.run(data(5), 1);
  EXPECT_FALSE(timeline->recording());
  EXPECT_FALSE(kt::recording());
  ASSERT_EQ(timeline->ranks().size(), 1u);
  const auto& r = timeline->ranks()[0];
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.clock_offset_ns, 0);
  for (const char* name : {"iteration 1", "iteration 4", "iteration 5"})
    EXPECT_EQ(count(r, name, kt::Lane::kEngine), 0) << name;
  for (const char* name : {"iteration 2", "iteration 3"}) EXPECT_EQ(count(r, name, kt::Lane::kEngine), 1) << name;
  EXPECT_EQ(count(r, "data", kt::Lane::kEngine), 2);
  EXPECT_EQ(count(r, "process", kt::Lane::kEngine), 2);
  EXPECT_EQ(count(r, "augment", kt::Lane::kStep), 2);
  EXPECT_EQ(count(r, "timeline_unit_test::LogLoss", kt::Lane::kEngine), 2);
  EXPECT_EQ(count(r, "ITERATION_COMPLETED", kt::Lane::kEngine), 2);
  for (const auto& e : r.events) {
    EXPECT_GE(e.start_ns, 0) << e.name;  // from the range's start
    EXPECT_GE(e.end_ns, e.start_ns) << e.name;
    if (e.name == "augment") EXPECT_GE(e.end_ns - e.start_ns, 2000000) << "a span shorter than its sleep";
  }
  const std::vector<std::string> want = {dir.path() + "/t/timeline_rank_0.json", dir.path() + "/t/timeline.json"};
  EXPECT_EQ(timeline->files(), want);
  for (const auto& path : want) {
    auto read = kindling::testing::run_command({KINDLING_PYTHON, "-c",
                                                "import json,sys; t=json.load(open(sys.argv[1])); "
                                                "assert sum(e['name'] == 'augment' for e in t['traceEvents']) == 2, t"
                                                "; assert t['otherData']['last_iteration'] == 3",
                                                path},
                                               {}, std::chrono::seconds(60));
    EXPECT_TRUE(read.ok()) << path << ": " << read.out << read.err;
  }
}

// A handler's span holds what the handler did, however late the timeline's observer hears of
// it: an observer before it that takes 5 ms made the span start 5 ms late, past the spans
// inside it (seen on real ranks under load: TimelineRanksTest, 2026-11-29).
struct SlowObserver : kindling::engine::EventObserver {
  void before_event(Engine&, const kindling::engine::Event&) override {}
  void after_event(Engine&, const kindling::engine::Event&) override {}
  void handler_called(Engine&, const kindling::engine::Event&, const kindling::engine::HandlerInfo&, double) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
};

TEST(TimelineTest, AHandlersSpanHoldsTheSpansInsideItWhateverObserversComeFirst) {
  kindling::testing::TempDir dir("timeline");
  Engine trainer = sleeping_engine();
  trainer.on(Events::ITERATION_COMPLETED, [] {
    kt::Span inside("inside", kt::Lane::kStep);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  trainer.add_observer(std::make_shared<SlowObserver>());
  auto timeline =
      std::make_shared<kh::Timeline>(kh::TimelineOptions().folder(dir.path()).first_iteration(1).last_iteration(2));
  timeline->attach(trainer);
  trainer.run(data(2), 1);
  ASSERT_EQ(timeline->ranks().size(), 1u);
  std::vector<kt::TimelineEvent> handlers, inside;
  for (const auto& e : timeline->ranks()[0].events) {
    if (e.name == "inside") inside.push_back(e);
    if (e.lane == kt::Lane::kEngine && e.name.find("TestBody") != std::string::npos) handlers.push_back(e);
  }
  ASSERT_EQ(inside.size(), 2u);
  ASSERT_EQ(handlers.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_LE(handlers[i].start_ns, inside[i].start_ns) << "iteration " << i + 1;
    EXPECT_GE(handlers[i].end_ns, inside[i].end_ns) << "iteration " << i + 1;
  }
}

TEST(TimelineTest, ARangePastTheRunEndsWithTheRun) {
  kindling::testing::TempDir dir("timeline");
  Engine trainer = sleeping_engine();
  auto timeline =
      std::make_shared<kh::Timeline>(kh::TimelineOptions().folder(dir.path()).first_iteration(4).last_iteration(100));
  timeline->attach(trainer);
  trainer.run(data(5), 1);
  EXPECT_FALSE(kt::recording());
  ASSERT_EQ(timeline->ranks().size(), 1u);
  EXPECT_EQ(count(timeline->ranks()[0], "iteration 5", kt::Lane::kEngine), 1);
  EXPECT_EQ(timeline->files().size(), 2u);
}

TEST(TimelineTest, KeepsAtMostMaxEventsAndCountsTheRest) {
  kindling::testing::TempDir dir("timeline");
  Engine trainer = sleeping_engine();
  auto timeline = std::make_shared<kh::Timeline>(
      kh::TimelineOptions().folder(dir.path()).first_iteration(1).last_iteration(3).max_events(4));
  timeline->attach(trainer);
  trainer.run(data(3), 1);
  ASSERT_EQ(timeline->ranks().size(), 1u);
  EXPECT_EQ(timeline->ranks()[0].events.size(), 4u);
  EXPECT_GT(timeline->ranks()[0].dropped_events, 0);
}

TEST(TimelineTest, MisuseIsRefusedWithTheValue) {
  EXPECT_NE(error_of([] { kh::Timeline(kh::TimelineOptions().first_iteration(0)); }).find("iterations 0 to 1"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              kh::Timeline(kh::TimelineOptions().first_iteration(5).last_iteration(4));
            }).find("iterations 5 to 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { kh::Timeline(kh::TimelineOptions().max_events(0)); }).find("max_events=0"),
            std::string::npos);
  EXPECT_NE(error_of([] { kh::Timeline(kh::TimelineOptions().clock_rounds(0)); }).find("clock_rounds=0"),
            std::string::npos);
  Engine trainer = sleeping_engine();
  kh::Timeline timeline;
  timeline.attach(trainer);
  EXPECT_NE(error_of([&] { timeline.attach(trainer); }).find("already attached"), std::string::npos);
}

TEST(TimelineTest, OneRangeAtATime) {
  kindling::testing::TempDir dir("timeline");
  Engine trainer = sleeping_engine();
  kh::Timeline first(kh::TimelineOptions().folder(dir.path() + "/a").first_iteration(1).last_iteration(3));
  kh::Timeline second(kh::TimelineOptions().folder(dir.path() + "/b").first_iteration(2).last_iteration(2));
  first.attach(trainer);
  second.attach(trainer);
  EXPECT_NE(error_of([&] { trainer.run(data(3), 1); }).find("another timeline records now"), std::string::npos);
}

}  // namespace timeline_unit_test
