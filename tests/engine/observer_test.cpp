// Engine observers (kindling/engine/observer.h): the order of their calls around each firing
// and handler, filtered-out handlers not reported, events without handlers still seen,
// removal, misuse, and handler_name for lambdas, function objects and function pointers.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/observer.h"
#include "support/errors.h"

namespace {

using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Event;
using kindling::engine::EventObserver;
using kindling::engine::Events;
using kindling::engine::HandlerInfo;
using kindling::engine::Value;
using kindling::testing::error_of;

// Writes what it sees as "+EVENT", "name@EVENT" and "-EVENT".
struct RecordingObserver : EventObserver {
  std::vector<std::string> seen;
  void before_event(Engine&, const Event& e) override { seen.push_back("+" + e.name()); }
  void after_event(Engine&, const Event& e) override { seen.push_back("-" + e.name()); }
  void handler_called(Engine&, const Event& e, const HandlerInfo& h, double seconds) override {
    EXPECT_GE(seconds, 0.0);
    seen.push_back(kindling::engine::handler_name(h) + "@" + e.name());
  }
};

struct ObservedHandler {
  void operator()() const {}
};

void observed_function(Engine&) {}

Engine observed_engine() {
  return Engine([](Engine&, const int&) -> Value { return 0.0; });
}

TEST(EngineObserverTest, SeesEveryFiringAndEachHandlerThatRuns) {
  Engine engine = observed_engine();
  engine.on(Events::ITERATION_COMPLETED, ObservedHandler());
  engine.on(Events::ITERATION_COMPLETED.every(2), &observed_function);
  auto observer = std::make_shared<RecordingObserver>();
  engine.add_observer(observer);
  engine.run(std::vector<int>{1, 2}, 1);
  const std::vector<std::string> expected{
      "+STARTED", "-STARTED", "+EPOCH_STARTED", "-EPOCH_STARTED",
      // iteration 1: the every(2) handler is filtered out and not reported
      "+GET_BATCH_STARTED", "-GET_BATCH_STARTED", "+GET_BATCH_COMPLETED", "-GET_BATCH_COMPLETED", "+ITERATION_STARTED",
      "-ITERATION_STARTED", "+ITERATION_COMPLETED", "ObservedHandler@ITERATION_COMPLETED", "-ITERATION_COMPLETED",
      // iteration 2
      "+GET_BATCH_STARTED", "-GET_BATCH_STARTED", "+GET_BATCH_COMPLETED", "-GET_BATCH_COMPLETED", "+ITERATION_STARTED",
      "-ITERATION_STARTED", "+ITERATION_COMPLETED", "ObservedHandler@ITERATION_COMPLETED",
      "handler #2 of ITERATION_COMPLETED@ITERATION_COMPLETED", "-ITERATION_COMPLETED", "+EPOCH_COMPLETED",
      "-EPOCH_COMPLETED", "+COMPLETED", "-COMPLETED"};
  EXPECT_EQ(observer->seen, expected);

  EXPECT_TRUE(engine.remove_observer(*observer));
  EXPECT_FALSE(engine.remove_observer(*observer));
  observer->seen.clear();
  engine.run(std::vector<int>{1}, 1);
  EXPECT_TRUE(observer->seen.empty());
}

TEST(EngineObserverTest, NamesLambdasAfterTheirFunction) {
  Engine engine = observed_engine();
  engine.on(Events::STARTED, [] {});
  auto observer = std::make_shared<RecordingObserver>();
  engine.add_observer(observer);
  engine.run(std::vector<int>{}, 1);
  ASSERT_GE(observer->seen.size(), 2u);
  const std::string name = observer->seen[1];                   // the lambda's call
  EXPECT_NE(name.find("TestBody"), std::string::npos) << name;  // the function that wrote it
  EXPECT_EQ(name.find('('), std::string::npos) << name;         // no argument lists
}

TEST(EngineObserverTest, MisuseErrors) {
  Engine engine = observed_engine();
  EXPECT_NE(error_of<UsageError>([&] { engine.add_observer(nullptr); }).find("the observer is null"),
            std::string::npos);
  auto observer = std::make_shared<RecordingObserver>();
  engine.add_observer(observer);
  EXPECT_NE(error_of<UsageError>([&] {
              engine.add_observer(observer);
            }).find("kindling::engine::Engine.add_observer: this observer is already added to this engine"),
            std::string::npos);
}

}  // namespace
