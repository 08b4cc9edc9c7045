// Event filters (every / once / before / after / predicate, as ignite's examples), `|`,
// handler handles, and user-defined events.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <list>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"

#include "support/engines.h"
#include "support/errors.h"

using kindling::testing::counting_engine;

namespace {

using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Event;
using kindling::engine::Events;
using kindling::engine::RunOptions;
using kindling::engine::Value;

std::vector<int64_t> fired_iterations(const Event& event, int64_t iterations) {
  Engine engine = counting_engine();
  std::vector<int64_t> fired;
  engine.on(event, [&](Engine& e) { fired.push_back(e.state().iteration); });
  std::vector<int> data(static_cast<std::size_t>(iterations), 0);
  engine.run(data, 1);
  return fired;
}

TEST(EventFilterTest, EveryOnceBeforeAfterAsIgnite) {
  EXPECT_EQ(fired_iterations(Events::ITERATION_COMPLETED.every(3), 10), (std::vector<int64_t>{3, 6, 9}));
  EXPECT_EQ(fired_iterations(Events::ITERATION_COMPLETED.every(1), 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(fired_iterations(Events::ITERATION_COMPLETED.once(4), 10), (std::vector<int64_t>{4}));
  EXPECT_EQ(fired_iterations(Events::ITERATION_COMPLETED.once({2, 7, 9}), 10), (std::vector<int64_t>{2, 7, 9}));
  EXPECT_EQ(fired_iterations(Events::ITERATION_COMPLETED.before(4), 10), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(fired_iterations(Events::ITERATION_COMPLETED.after(7), 10), (std::vector<int64_t>{8, 9, 10}));
  EXPECT_EQ(fired_iterations(Events::ITERATION_COMPLETED.after(2).before(5), 10), (std::vector<int64_t>{3, 4}));
  // ignite's example: every=5, after=8, before=25 -> 9, 14, 19, 24.
  EXPECT_EQ(fired_iterations(Events::ITERATION_COMPLETED.every(5).after(8).before(25), 30),
            (std::vector<int64_t>{9, 14, 19, 24}));
  EXPECT_EQ(
      fired_iterations(Events::ITERATION_COMPLETED.filter([](const Engine&, int64_t c) { return c % 4 == 1; }), 10),
      (std::vector<int64_t>{1, 5, 9}));
}

TEST(EventFilterTest, GetBatchEventsCountBeforeTheIncrement) {
  EXPECT_EQ(fired_iterations(Events::GET_BATCH_STARTED.every(2), 5), (std::vector<int64_t>{0, 2, 4}));
}

TEST(EventFilterTest, MisuseIsRejected) {
  EXPECT_THROW(Events::ITERATION_COMPLETED.every(0), UsageError);
  EXPECT_THROW(Events::ITERATION_COMPLETED.once(0), UsageError);
  EXPECT_THROW(Events::ITERATION_COMPLETED.once(std::vector<int64_t>{}), UsageError);
  EXPECT_THROW(Events::ITERATION_COMPLETED.before(-1), UsageError);
  EXPECT_THROW(Events::ITERATION_COMPLETED.once(3).every(2), UsageError);
  EXPECT_THROW(Events::ITERATION_COMPLETED.every(2).once(3), UsageError);
  EXPECT_THROW(Events::ITERATION_COMPLETED.filter({}), UsageError);
  EXPECT_THROW(Events::TERMINATE.every(2), UsageError);
  EXPECT_THROW(Event::custom(""), UsageError);
}

TEST(EventFilterTest, OrRegistersOnEachAndOneHandleRemovesAll) {
  Engine engine = counting_engine();
  std::vector<std::string> seen;
  auto h = engine.on(Events::STARTED | Events::COMPLETED | Events::EPOCH_COMPLETED.every(2),
                     [&](Engine& e) { seen.push_back(e.last_event()->name()); });
  std::vector<int> data{1};
  engine.run(data, 4);
  EXPECT_EQ(seen, (std::vector<std::string>{"STARTED", "EPOCH_COMPLETED", "EPOCH_COMPLETED", "COMPLETED"}));
  EXPECT_TRUE(engine.has_event_handler(h));
  EXPECT_TRUE(engine.has_event_handler(Events::COMPLETED));
  engine.remove_event_handler(h);
  EXPECT_FALSE(engine.has_event_handler(h));
  EXPECT_FALSE(engine.has_event_handler(Events::COMPLETED));
  EXPECT_THROW(engine.remove_event_handler(h), UsageError);
  seen.clear();
  // ignite: a finished run given a max_epochs below its epoch is an error, not a restart.
  EXPECT_THROW(engine.run(data, RunOptions().max_epochs(1)), UsageError);
  engine.run(data);  // finished, no new bound: a fresh run of one epoch
  EXPECT_TRUE(seen.empty());
}

TEST(EventFilterTest, HandlerAddedWhileFiringRunsInTheSameFiring) {
  Engine engine = counting_engine();
  int later = 0;
  engine.on(Events::STARTED, [&](Engine& e) { e.on(Events::STARTED, [&] { ++later; }); });
  std::vector<int> data{1};
  engine.run(data, 1);
  EXPECT_EQ(later, 1);
}

// ignite iterates over the handler list the firing started with, and removal replaces that
// list: a handler removed while its event fires still runs in that firing; one added after
// a removal in the same firing waits for the next.
TEST(EventFilterTest, HandlerRemovedWhileFiringStillRunsInThatFiring) {
  Engine engine = counting_engine();
  std::vector<std::string> calls;
  kindling::engine::HandlerHandle second;
  engine.on(Events::EPOCH_COMPLETED, [&](Engine& e) {
    calls.push_back("first@" + std::to_string(e.state().epoch));
    if (second.attached()) {
      second.remove();
      e.on(Events::EPOCH_COMPLETED, [&](Engine& e2) { calls.push_back("added@" + std::to_string(e2.state().epoch)); });
    }
  });
  second = engine.on(Events::EPOCH_COMPLETED,
                     [&](Engine& e) { calls.push_back("second@" + std::to_string(e.state().epoch)); });
  std::vector<int> data{1, 2};
  engine.run(data, 2);
  EXPECT_EQ(calls, (std::vector<std::string>{"first@1", "second@1", "first@2", "added@2"}));
}

TEST(CustomEventTest, RegisteredEventsFireWithTheirOwnCounter) {
  const Event backward = Event::custom("BACKWARD_DONE");
  Engine engine([&](Engine& e, const int& b) -> Value {
    e.fire_event(backward);
    return b;
  });
  EXPECT_THROW(engine.on(backward, [] {}), UsageError);  // not registered yet
  engine.register_events({backward});
  std::vector<int64_t> fired;
  engine.on(backward.every(2), [&](Engine& e) { fired.push_back(e.state().iteration); });
  std::vector<int> data{1, 2, 3, 4, 5};
  engine.run(data, 1);
  EXPECT_EQ(fired, (std::vector<int64_t>{2, 4}));
  EXPECT_THROW(engine.register_events({Events::STARTED}), UsageError);
  EXPECT_THROW(engine.fire_event(Event::custom("OTHER")), UsageError);
}

}  // namespace

namespace {

// Misspelt metric names and missing attributes name the key and the keys present.
TEST(StateMapsTest, MissingKeyNamesTheKeyAndTheKeysPresent) {
  kindling::engine::State state;
  state.metrics["accuracy"] = 0.5;
  state.metrics["loss"] = 0.25;
  std::string msg = kindling::testing::error_of<UsageError>([&] { state.metrics.at("acuracy"); });
  EXPECT_NE(msg.find("state().metrics has no 'acuracy'; it holds 'accuracy', 'loss'"), std::string::npos) << msg;
  const auto& constant = state;
  msg = kindling::testing::error_of<UsageError>([&] { constant.attributes.at("best"); });
  EXPECT_NE(msg.find("state().attributes has no 'best'; it holds nothing"), std::string::npos) << msg;
  EXPECT_DOUBLE_EQ(state.metrics.at("accuracy").number(), 0.5);
  std::ostringstream printed;
  printed << state.metrics.at("loss");
  EXPECT_EQ(printed.str(), state.metrics.at("loss").to_string());
}

}  // namespace
