// BasicTimeProfiler and HandlersTimeProfiler on real sleeps: exact counts per event and per
// handler, lower bounds that only the guaranteed minimum sleeps decide (never an upper bound
// on a duration), no double counting (the disjoint measurements fit in the run's wall time),
// handler names, the text reports, the CSV files (parsed back, nothing half-written left),
// and the misuse errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/profilers/handlers_time_profiler.h"
#include "kindling/handlers/profilers/time_profiler.h"
#include "support/errors.h"
#include "support/files.h"

namespace {

namespace kh = kindling::handlers;
using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Event;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;
using ProfilerClock = std::chrono::steady_clock;

// Sleeps in whole milliseconds: sleep_for waits at least that many nanoseconds, so a measured
// span holding one is at least the threshold in seconds (both correctly rounded from integers).
using ProfilerMs = std::chrono::milliseconds;
constexpr ProfilerMs kDataSleepMs{5}, kProcessSleepMs{10}, kSlowHandlerSleepMs{30}, kEpochSleepMs{5};
constexpr double kDataSleep = 0.005, kProcessSleep = 0.010, kSlowHandlerSleep = 0.030, kEpochSleep = 0.005;
// Sums of n measurements, each at least `each`, against n * each: a relative margin for rounding.
constexpr double kSumMargin = 1 - 1e-12;

void profiler_sleep(ProfilerMs pause) { std::this_thread::sleep_for(pause); }

// Batches 0 .. n-1, each taking kDataSleep to produce (inside the engine's draw of a batch).
struct ProfilerSlowBatches {
  int n;
  struct iterator {
    int i;
    int operator*() const {
      profiler_sleep(kDataSleepMs);
      return i;
    }
    iterator& operator++() {
      ++i;
      return *this;
    }
    bool operator==(const iterator& o) const { return i == o.i; }
    bool operator!=(const iterator& o) const { return i != o.i; }
  };
  iterator begin() const { return {0}; }
  iterator end() const { return {n}; }
  std::size_t size() const { return static_cast<std::size_t>(n); }
};

// A named function object: its class names it in the reports.
struct ProfilerSlowLogger {
  void operator()(Engine&) const { profiler_sleep(kSlowHandlerSleepMs); }
};

void profiler_free_function(Engine&) {}

// A trainer whose process function sleeps kProcessSleep, with a slow and a no-op handler at
// ITERATION_COMPLETED and a sleeping one at EPOCH_COMPLETED.
Engine profiled_trainer() {
  Engine trainer([](Engine&, const int&) -> Value {
    profiler_sleep(kProcessSleepMs);
    return 0.0;
  });
  trainer.on(Events::ITERATION_COMPLETED, ProfilerSlowLogger());
  trainer.on(Events::ITERATION_COMPLETED, [] {});
  trainer.on(Events::EPOCH_COMPLETED, [] { profiler_sleep(kEpochSleepMs); });
  return trainer;
}

const kh::EventHandlersTimes& event_times(const kh::BasicTimeProfilerResults& r, const std::string& event) {
  for (const auto& e : r.event_handlers_stats) {
    if (e.event == event) return e;
  }
  throw std::runtime_error("no event " + event);
}

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream fields(line);
    std::string cell;
    while (std::getline(fields, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.push_back("");
    rows.push_back(cells);
  }
  return rows;
}

TEST(BasicTimeProfilerTest, MeasuresDataProcessingAndEachEventsHandlers) {
  Engine trainer = profiled_trainer();
  auto profiler = std::make_shared<kh::BasicTimeProfiler>();
  profiler->attach(trainer);
  const auto before = ProfilerClock::now();
  trainer.run(ProfilerSlowBatches{3}, 2);
  const double wall = std::chrono::duration<double>(ProfilerClock::now() - before).count();

  const kh::BasicTimeProfilerResults r = profiler->get_results();
  EXPECT_EQ(r.processing_stats.count, 6);
  EXPECT_GE(r.processing_stats.min, kProcessSleep);
  EXPECT_EQ(r.dataflow_stats.count, 6);
  EXPECT_GE(r.dataflow_stats.min, kDataSleep);
  const std::vector<std::pair<std::string, int64_t>> counts{
      {"STARTED", 1},         {"EPOCH_STARTED", 2}, {"ITERATION_STARTED", 6}, {"ITERATION_COMPLETED", 6},
      {"EPOCH_COMPLETED", 2}, {"COMPLETED", 1},     {"GET_BATCH_STARTED", 6}, {"GET_BATCH_COMPLETED", 6}};
  ASSERT_EQ(r.event_handlers_stats.size(), counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(r.event_handlers_stats[i].event, counts[i].first);  // ignite's order
    EXPECT_EQ(r.event_handlers_stats[i].stats.count, counts[i].second) << counts[i].first;
  }
  const auto& completed = event_times(r, "ITERATION_COMPLETED");
  EXPECT_GE(completed.stats.min, kSlowHandlerSleep);
  EXPECT_GE(completed.stats.total, 6 * kSlowHandlerSleep * kSumMargin);
  EXPECT_GE(event_times(r, "EPOCH_COMPLETED").stats.min, kEpochSleep);
  ASSERT_EQ(completed.handler_names.size(), 2u);
  EXPECT_EQ(completed.handler_names[0], "ProfilerSlowLogger");
  EXPECT_TRUE(event_times(r, "STARTED").handler_names.empty());
  // Statistics as ignite's: mean, min <= mean <= max, indices inside the series.
  EXPECT_NEAR(completed.stats.mean, completed.stats.total / 6, 1e-12);
  EXPECT_LE(completed.stats.min, completed.stats.mean);
  EXPECT_LE(completed.stats.mean, completed.stats.max);
  EXPECT_GE(completed.stats.min_index, 0);
  EXPECT_LT(completed.stats.max_index, 6);
  // The spans are disjoint (the handlers are not counted again in processing or dataflow):
  // all of them fit in the run's wall time. Counting the slow handler twice would not.
  EXPECT_LE(r.processing_stats.total + r.dataflow_stats.total + r.event_handlers_total, wall);
  double sum = 0;
  for (const auto& e : r.event_handlers_stats) sum += e.stats.total;
  EXPECT_DOUBLE_EQ(r.event_handlers_total, sum);
}

TEST(BasicTimeProfilerTest, StartsOverAtEachRunAndReportsWhatNeverRan) {
  Engine trainer = profiled_trainer();
  auto profiler = std::make_shared<kh::BasicTimeProfiler>();
  profiler->attach(trainer);
  const std::string empty = kh::BasicTimeProfiler::print_results(profiler->get_results());
  EXPECT_NE(empty.find("not triggered"), std::string::npos) << empty;
  trainer.run(ProfilerSlowBatches{2}, 1);
  trainer.run(ProfilerSlowBatches{1}, 1);  // a new run: 1 iteration
  const kh::BasicTimeProfilerResults r = profiler->get_results();
  EXPECT_EQ(r.processing_stats.count, 1);
  EXPECT_EQ(event_times(r, "ITERATION_COMPLETED").stats.count, 1);
  EXPECT_TRUE(std::isnan(r.processing_stats.std_dev));  // one measurement: no std
  const std::string text = kh::BasicTimeProfiler::print_results(r);
  for (const char* part : {"Processing function", "Dataflow", "- ITERATION_COMPLETED", "ProfilerSlowLogger",
                           "Event handlers, total", "None"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
  }
  // Detached: the next run is not measured.
  profiler->detach(trainer);
  trainer.run(ProfilerSlowBatches{2}, 1);
  EXPECT_EQ(profiler->get_results().processing_stats.count, 1);
}

TEST(BasicTimeProfilerTest, WritesEveryIterationAsCsvAtOnce) {
  kindling::testing::TempDir dir("profiler");
  Engine trainer = profiled_trainer();
  auto profiler = std::make_shared<kh::BasicTimeProfiler>();
  profiler->attach(trainer);
  trainer.run(ProfilerSlowBatches{2}, 2);
  const std::string path = dir.path() + "/sub/time_profiling.csv";
  profiler->write_results(path);
  EXPECT_EQ(kindling::testing::files_in(dir.path() + "/sub"), std::vector<std::string>{"time_profiling.csv"});
  const auto rows = read_csv(path);
  ASSERT_EQ(rows.size(), 5u);  // the header and 4 iterations
  EXPECT_EQ(rows[0], (std::vector<std::string>{
                         "epoch", "iteration", "processing_stats", "dataflow_stats", "Event_STARTED", "Event_COMPLETED",
                         "Event_EPOCH_STARTED", "Event_EPOCH_COMPLETED", "Event_ITERATION_STARTED",
                         "Event_ITERATION_COMPLETED", "Event_GET_BATCH_STARTED", "Event_GET_BATCH_COMPLETED"}));
  for (std::size_t k = 1; k < rows.size(); ++k) {
    ASSERT_EQ(rows[k].size(), 12u);
    EXPECT_EQ(rows[k][0], std::to_string((k + 1) / 2));  // epochs 1, 1, 2, 2
    EXPECT_EQ(rows[k][1], std::to_string(k));
    for (std::size_t c = 2; c < 12; ++c) EXPECT_FALSE(rows[k][c].empty()) << k << "," << c;  // all measured
    EXPECT_GE(std::stod(rows[k][2]), kProcessSleep);
    EXPECT_GE(std::stod(rows[k][3]), kDataSleep);
    EXPECT_GE(std::stod(rows[k][7]), kEpochSleep);
    EXPECT_GE(std::stod(rows[k][9]), kSlowHandlerSleep);
  }
  // Rewriting replaces the file whole.
  trainer.run(ProfilerSlowBatches{1}, 2);  // a new run of 2 epochs of 1 iteration
  profiler->write_results(path);
  EXPECT_EQ(read_csv(path).size(), 3u);
  EXPECT_EQ(kindling::testing::files_in(dir.path() + "/sub").size(), 1u);
}

TEST(HandlersTimeProfilerTest, TimesEachHandlerAtEachEvent) {
  Engine trainer = profiled_trainer();
  const Event kProfiled = Event::custom("PROFILED");
  trainer.register_events({kProfiled});
  trainer.on(Events::ITERATION_COMPLETED.every(2), &profiler_free_function);
  trainer.on(Events::ITERATION_COMPLETED, [&](Engine& e) { e.fire_event(kProfiled); });
  trainer.on(kProfiled, ProfilerSlowLogger());
  auto profiler = std::make_shared<kh::HandlersTimeProfiler>();
  profiler->attach(trainer);
  trainer.run(ProfilerSlowBatches{3}, 2);

  const kh::HandlersTimeProfilerResults r = profiler->get_results();
  ASSERT_EQ(r.handlers.size(), 6u);
  // By event (built-in order, the user-defined one last), then attach order.
  const std::vector<std::pair<std::string, int64_t>> expected{{"ITERATION_COMPLETED", 6}, {"ITERATION_COMPLETED", 6},
                                                              {"ITERATION_COMPLETED", 3}, {"ITERATION_COMPLETED", 6},
                                                              {"EPOCH_COMPLETED", 2},     {"PROFILED", 6}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(r.handlers[i].event, expected[i].first) << i;
    EXPECT_EQ(r.handlers[i].stats.count, expected[i].second) << i;
  }
  EXPECT_EQ(r.handlers[0].handler, "ProfilerSlowLogger");
  EXPECT_EQ(r.handlers[2].handler, "handler #3 of ITERATION_COMPLETED");  // a function pointer
  EXPECT_EQ(r.handlers[1].handler.find("handler #"), std::string::npos);  // a lambda: its type names it
  EXPECT_EQ(r.handlers[5].handler, "ProfilerSlowLogger");
  // The slow handler dominates the no-op one; the one firing PROFILED includes its handler.
  EXPECT_GE(r.handlers[0].stats.total, 6 * kSlowHandlerSleep * kSumMargin);
  EXPECT_LT(r.handlers[1].stats.total, r.handlers[0].stats.total);
  EXPECT_GE(r.handlers[3].stats.min, kSlowHandlerSleep);
  EXPECT_GE(r.handlers[4].stats.min, kEpochSleep);
  EXPECT_EQ(r.processing_stats.count, 6);
  EXPECT_GE(r.processing_stats.min, kProcessSleep);
  EXPECT_EQ(r.dataflow_stats.count, 6);
  EXPECT_GE(r.dataflow_stats.min, kDataSleep);
  double sum = 0;
  for (const auto& h : r.handlers) sum += h.stats.total;
  EXPECT_DOUBLE_EQ(r.total, sum);

  const std::string text = kh::HandlersTimeProfiler::print_results(r);
  for (const char* part : {"Handler", "Event Name", "ProfilerSlowLogger", "PROFILED", "Total", "Processing took total",
                           "Dataflow took total"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
  }
}

TEST(HandlersTimeProfilerTest, WritesOneColumnPerHandler) {
  kindling::testing::TempDir dir("handlers-profiler");
  Engine trainer = profiled_trainer();
  trainer.on(Events::ITERATION_COMPLETED.every(2), &profiler_free_function);
  auto profiler = std::make_shared<kh::HandlersTimeProfiler>();
  profiler->attach(trainer);
  trainer.run(ProfilerSlowBatches{2}, 2);
  const std::string path = dir.path() + "/handlers.csv";
  profiler->write_results(path);
  EXPECT_EQ(kindling::testing::files_in(dir.path()), std::vector<std::string>{"handlers.csv"});
  const auto rows = read_csv(path);
  ASSERT_EQ(rows.size(), 5u);  // the header and the 4 iterations' calls
  ASSERT_EQ(rows[0].size(), 7u);
  EXPECT_EQ(rows[0][0], "#");
  EXPECT_EQ(rows[0][1], "processing_stats");
  EXPECT_EQ(rows[0][2], "dataflow_stats");
  EXPECT_EQ(rows[0][3], "ProfilerSlowLogger (ITERATION_COMPLETED)");
  EXPECT_EQ(rows[0][5], "handler #3 of ITERATION_COMPLETED (ITERATION_COMPLETED)");
  for (std::size_t k = 1; k < rows.size(); ++k) {
    ASSERT_EQ(rows[k].size(), 7u);
    EXPECT_EQ(rows[k][0], std::to_string(k));
    EXPECT_GE(std::stod(rows[k][3]), kSlowHandlerSleep);
    EXPECT_EQ(rows[k][5].empty(), k > 2) << k;  // every(2): 2 calls, then empty cells
    EXPECT_EQ(rows[k][6].empty(), k > 2) << k;  // EPOCH_COMPLETED: 2 calls
  }
}

TEST(TimeProfilerTest, MisuseErrors) {
  Engine trainer = profiled_trainer();
  Engine other = profiled_trainer();
  kh::BasicTimeProfiler local;
  EXPECT_NE(error_of<UsageError>([&] {
              local.attach(trainer);
            }).find("kindling::handlers::BasicTimeProfiler.attach: the object must be owned by a std::shared_ptr"),
            std::string::npos);
  auto basic = std::make_shared<kh::BasicTimeProfiler>();
  basic->attach(trainer);
  EXPECT_NE(error_of<UsageError>([&] { basic->attach(other); }).find("already attached to an engine"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] {
              basic->detach(other);
            }).find("kindling::handlers::BasicTimeProfiler.detach: this profiler is not attached to engine"),
            std::string::npos);
  auto handlers = std::make_shared<kh::HandlersTimeProfiler>();
  EXPECT_NE(error_of<UsageError>([&] {
              handlers->detach(trainer);
            }).find("kindling::handlers::HandlersTimeProfiler.detach: this profiler is not attached"),
            std::string::npos);
  handlers->attach(trainer);
  EXPECT_NE(error_of<UsageError>([&] { trainer.add_observer(handlers); }).find("already added"), std::string::npos);
  // A path under a regular file cannot be written: a kindling::Error that names it.
  kindling::testing::TempDir dir("profiler-misuse");
  std::ofstream(dir.path() + "/file") << "x";
  const std::string bad = dir.path() + "/file/out.csv";
  EXPECT_NE(error_of<kindling::Error>([&] { basic->write_results(bad); }).find("BasicTimeProfiler.write_results"),
            std::string::npos);
  EXPECT_NE(error_of<kindling::Error>([&] { handlers->write_results(bad); }).find("not a directory"),
            std::string::npos);
}

}  // namespace
