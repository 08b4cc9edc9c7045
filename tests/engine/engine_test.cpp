// Engine: ignite's order of events, filters, terminate / terminate_epoch / interrupt,
// exception routing and the run / resume rules (expected sequences from ignite's behaviour).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <list>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"

#include "support/engines.h"

using kindling::testing::counting_engine;

namespace {

using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Event;
using kindling::engine::Events;
using kindling::engine::EventsList;
using kindling::engine::RunOptions;
using kindling::engine::State;
using kindling::engine::Value;

const std::vector<Event>& all_events() {
  static const std::vector<Event> events{Events::STARTED,
                                         Events::EPOCH_STARTED,
                                         Events::GET_BATCH_STARTED,
                                         Events::GET_BATCH_COMPLETED,
                                         Events::ITERATION_STARTED,
                                         Events::ITERATION_COMPLETED,
                                         Events::DATALOADER_STOP_ITERATION,
                                         Events::EXCEPTION_RAISED,
                                         Events::TERMINATE_SINGLE_EPOCH,
                                         Events::EPOCH_COMPLETED,
                                         Events::TERMINATE,
                                         Events::COMPLETED,
                                         Events::INTERRUPT};
  return events;
}

std::string abbrev(const std::string& name) {
  static const std::map<std::string, std::string> a{{"STARTED", "S"},
                                                    {"EPOCH_STARTED", "ES"},
                                                    {"GET_BATCH_STARTED", "GBS"},
                                                    {"GET_BATCH_COMPLETED", "GBC"},
                                                    {"ITERATION_STARTED", "IS"},
                                                    {"ITERATION_COMPLETED", "IC"},
                                                    {"DATALOADER_STOP_ITERATION", "DSI"},
                                                    {"EXCEPTION_RAISED", "ER"},
                                                    {"TERMINATE_SINGLE_EPOCH", "TSE"},
                                                    {"EPOCH_COMPLETED", "EC"},
                                                    {"TERMINATE", "T"},
                                                    {"COMPLETED", "C"},
                                                    {"INTERRUPT", "INT"}};
  return a.at(name);
}

// Records every event as "ABBREV" or "ABBREV<counter>" for iteration / epoch events.
struct Recorder {
  std::vector<std::string> seen;
  void attach(Engine& engine) {
    for (const Event& e : all_events()) {
      if (e.same_event(Events::EXCEPTION_RAISED)) {
        continue;  // attached by the tests that want exceptions handled
      }
      engine.on(e, [this, e](Engine& en) {
        const int64_t c = en.state().counter(e);
        seen.push_back(abbrev(e.name()) + (c >= 0 ? std::to_string(c) : ""));
      });
    }
  }
  std::string str() const {
    std::string out;
    for (const auto& s : seen) out += (out.empty() ? "" : " ") + s;
    return out;
  }
};

TEST(EngineTest, FiresIgnitesOrderOverTwoEpochs) {
  Engine engine = counting_engine();
  Recorder r;
  r.attach(engine);
  std::vector<int> data{1, 2};
  engine.run(data, 2);
  // The data runs out at the start of epoch 2: GET_BATCH_STARTED, DATALOADER_STOP_ITERATION, then the batch.
  EXPECT_EQ(r.str(),
            "S0 ES1 GBS0 GBC0 IS1 IC1 GBS1 GBC1 IS2 IC2 EC1 ES2 GBS2 DSI GBC2 IS3 IC3 GBS3 GBC3 IS4 IC4 EC2 C2");
  EXPECT_EQ(engine.state().iteration, 4);
  EXPECT_EQ(engine.state().epoch, 2);
  EXPECT_EQ(engine.state().output.number(), 2);
}

TEST(EngineTest, EpochLengthLongerThanDataRestartsMidEpoch) {
  std::vector<int> processed;
  Engine engine = counting_engine(&processed);
  Recorder r;
  r.attach(engine);
  std::vector<int> data{10, 20, 30};
  engine.run(data, RunOptions().max_epochs(1).epoch_length(5));
  EXPECT_EQ(r.str(),
            "S0 ES1 GBS0 GBC0 IS1 IC1 GBS1 GBC1 IS2 IC2 GBS2 GBC2 IS3 IC3 GBS3 DSI GBC3 IS4 IC4 GBS4 GBC4 "
            "IS5 IC5 EC1 C1");
  EXPECT_EQ(processed, (std::vector<int>{10, 20, 30, 10, 20}));
}

TEST(EngineTest, EpochLengthShorterThanDataContinuesTheDataAcrossEpochs) {
  std::vector<int> processed;
  Engine engine = counting_engine(&processed);
  std::vector<int> data{1, 2, 3, 4, 5};
  engine.run(data, RunOptions().max_epochs(3).epoch_length(2));
  EXPECT_EQ(processed, (std::vector<int>{1, 2, 3, 4, 5, 1}));
}

// A range without size(): the first pass defines the epoch length.
struct Unsized {
  std::list<int> items;
  auto begin() const { return items.begin(); }
  auto end() const { return items.end(); }
};

TEST(EngineTest, DataWithoutSizeDefinesEpochLengthOnFirstPass) {
  Engine engine = counting_engine();
  Recorder r;
  r.attach(engine);
  Unsized data{{7, 8}};
  engine.run(data, 2);
  EXPECT_EQ(r.str(),
            "S0 ES1 GBS0 GBC0 IS1 IC1 GBS1 GBC1 IS2 IC2 GBS2 EC1 ES2 GBS2 DSI GBC2 IS3 IC3 GBS3 GBC3 IS4 IC4 "
            "EC2 C2");
  EXPECT_EQ(engine.state().epoch_length, 2);
}

TEST(EngineTest, MaxItersInsideAnEpochEndsThroughTerminate) {
  Engine engine = counting_engine();
  Recorder r;
  r.attach(engine);
  std::vector<int> data{1, 2, 3};
  engine.run(data, RunOptions().max_iters(2));
  EXPECT_EQ(r.str(), "S0 ES1 GBS0 GBC0 IS1 IC1 GBS1 GBC1 IS2 IC2 T C1");
}

TEST(EngineTest, MaxItersOnAnEpochBoundaryCompletesTheEpoch) {
  Engine engine = counting_engine();
  Recorder r;
  r.attach(engine);
  std::vector<int> data{1, 2};
  engine.run(data, RunOptions().max_iters(2));
  EXPECT_EQ(r.str(), "S0 ES1 GBS0 GBC0 IS1 IC1 GBS1 GBC1 IS2 IC2 EC1 C1");
}

TEST(EngineTest, TerminateAtIterationStartedSkipsTheProcessFunctionAndEpochCompleted) {
  std::vector<int> processed;
  Engine engine = counting_engine(&processed);
  Recorder r;
  r.attach(engine);
  engine.on(Events::ITERATION_STARTED.once(2), [](Engine& e) { e.terminate(); });
  std::vector<int> data{1, 2, 3};
  engine.run(data, 3);
  EXPECT_EQ(r.str(), "S0 ES1 GBS0 GBC0 IS1 IC1 GBS1 GBC1 IS2 T C1");
  EXPECT_EQ(processed, std::vector<int>{1});
  EXPECT_EQ(engine.state().iteration, 2);
}

TEST(EngineTest, TerminateInEpochCompletedAndSkipCompleted) {
  Engine engine = counting_engine();
  Recorder r;
  r.attach(engine);
  engine.on(Events::EPOCH_COMPLETED.once(1), [](Engine& e) { e.terminate(/*skip_completed=*/true); });
  std::vector<int> data{1};
  engine.run(data, 3);
  EXPECT_EQ(r.str(), "S0 ES1 GBS0 GBC0 IS1 IC1 EC1 T");
}

TEST(EngineTest, TerminateAtStartedRunsNoEpoch) {
  Engine engine = counting_engine();
  Recorder r;
  r.attach(engine);
  engine.on(Events::STARTED, [](Engine& e) { e.terminate(); });
  std::vector<int> data{1};
  engine.run(data, 3);
  EXPECT_EQ(r.str(), "S0 T C0");
}

TEST(EngineTest, TerminateEpochEndsOnlyTheCurrentEpoch) {
  std::vector<int> processed;
  Engine engine = counting_engine(&processed);
  Recorder r;
  r.attach(engine);
  engine.on(Events::ITERATION_COMPLETED.once(1), [](Engine& e) { e.terminate_epoch(); });
  std::vector<int> data{1, 2, 3};
  engine.run(data, 2);
  // As ignite: epoch 2 runs a whole epoch_length on a fresh pass over the data (ignite's
  // set_data), so no DATALOADER_STOP_ITERATION in the middle of it.
  EXPECT_EQ(r.str(),
            "S0 ES1 GBS0 GBC0 IS1 IC1 TSE EC1 ES2 GBS1 GBC1 IS2 IC2 GBS2 GBC2 IS3 IC3 GBS3 GBC3 IS4 IC4 EC2 C2");
  EXPECT_EQ(processed, (std::vector<int>{1, 1, 2, 3}));
}

// After a terminate_epoch(), a run resumed from any later state_dict() draws the batches
// the uninterrupted run drew (the fresh pass's origin is part of the state).
TEST(EngineTest, TerminateEpochThenResumeDrawsTheSameBatches) {
  const std::vector<int> data{1, 2, 3, 4};
  std::vector<int> whole;
  std::vector<kindling::StateDict> saved;
  Engine a = counting_engine(&whole);
  a.on(Events::ITERATION_COMPLETED.once(2), [](Engine& e) { e.terminate_epoch(); });
  a.on(Events::ITERATION_COMPLETED, [&](Engine& e) { saved.push_back(e.state_dict()); });
  // The state saved in the iteration that asks for terminate_epoch() cannot know of it: the
  // one to resume from is taken once the epoch has ended.
  a.on(Events::TERMINATE_SINGLE_EPOCH, [&](Engine& e) { saved.back() = e.state_dict(); });
  a.run(data, 3);
  ASSERT_EQ(whole, (std::vector<int>{1, 2, 1, 2, 3, 4, 1, 2, 3, 4}));
  EXPECT_EQ(a.state().epoch, 3);
  for (std::size_t at = 0; at + 1 < saved.size(); ++at) {  // the last state is a finished run
    std::vector<int> rest;
    Engine b = counting_engine(&rest);
    b.on(Events::ITERATION_COMPLETED.once(2), [](Engine& e) { e.terminate_epoch(); });  // the same program
    b.load_state_dict(saved[at]);
    b.run(data, 3);
    EXPECT_EQ(rest, std::vector<int>(whole.begin() + static_cast<std::ptrdiff_t>(at) + 1, whole.end()))
        << "resumed after iteration " << at + 1;
    EXPECT_EQ(b.state().epoch, 3) << "resumed after iteration " << at + 1;
  }
}

TEST(EngineTest, TerminateEpochInEpochStartedIsAnError) {
  Engine engine = counting_engine();
  engine.on(Events::EPOCH_STARTED, [](Engine& e) { e.terminate_epoch(); });
  std::vector<int> data{1};
  try {
    engine.run(data, 1);
    FAIL() << "expected an error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("terminate_epoch() was called in a handler of EPOCH_STARTED"),
              std::string::npos)
        << e.what();
  }
}

TEST(EngineTest, InterruptPausesAndTheNextRunContinuesRightThere) {
  std::vector<int> processed;
  Engine engine = counting_engine(&processed);
  Recorder r;
  r.attach(engine);
  engine.on(Events::ITERATION_COMPLETED.once(2), [](Engine& e) { e.interrupt(); });
  std::vector<int> data{1, 2, 3};
  engine.run(data, 1);
  EXPECT_EQ(r.str(), "S0 ES1 GBS0 GBC0 IS1 IC1 GBS1 GBC1 IS2 IC2 INT");
  r.seen.clear();
  engine.run(data, 1);
  EXPECT_EQ(r.str(), "GBS2 GBC2 IS3 IC3 EC1 C1");
  EXPECT_EQ(processed, (std::vector<int>{1, 2, 3}));
}

TEST(EngineTest, InterruptAtGetBatchCompletedKeepsTheFetchedBatch) {
  std::vector<int> processed;
  Engine engine = counting_engine(&processed);
  engine.on(Events::GET_BATCH_COMPLETED.once(1), [](Engine& e) { e.interrupt(); });
  std::vector<int> data{1, 2, 3};
  engine.run(data, 1);
  EXPECT_EQ(processed, (std::vector<int>{1}));
  EXPECT_EQ(engine.state().batch_as<int>(), 2);
  engine.run(data, 1);
  EXPECT_EQ(processed, (std::vector<int>{1, 2, 3}));
}

TEST(EngineTest, ExceptionWithoutHandlerLeavesRun) {
  Engine engine([](Engine&, const int& b) -> Value {
    if (b == 2) throw std::runtime_error("bad batch");
    return b;
  });
  std::vector<int> data{1, 2, 3};
  EXPECT_THROW(
      {
        try {
          engine.run(data, 1);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "bad batch");
          throw;
        }
      },
      std::runtime_error);
}

TEST(EngineTest, ExceptionInsideAnEpochGoesToHandlersAndTheEpochEnds) {
  Engine engine([](Engine&, const int& b) -> Value {
    if (b == 2) throw std::runtime_error("bad batch");
    return b;
  });
  Recorder r;
  r.attach(engine);
  std::string message;
  engine.on(Events::EXCEPTION_RAISED, [&](Engine& e, const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& x) {
      message = x.what();
    }
    EXPECT_EQ(e.exception(), error);
    if (e.state().epoch == 2) e.terminate();
  });
  std::vector<int> data{1, 2};
  engine.run(data, 3);
  EXPECT_EQ(message, "bad batch");
  // ignite: the rest of the epoch is abandoned, EPOCH_COMPLETED fires, the run goes on.
  EXPECT_EQ(r.str(), "S0 ES1 GBS0 GBC0 IS1 IC1 GBS1 GBC1 IS2 EC1 ES2 GBS2 DSI GBC2 IS3 IC3 GBS3 GBC3 IS4 EC2 T C2");
}

TEST(EngineTest, ExceptionInAnEpochHandlerEndsTheRunWithoutCompleted) {
  Engine engine = counting_engine();
  Recorder r;
  r.attach(engine);
  int handled = 0;
  engine.on(Events::EPOCH_COMPLETED, [](Engine&) { throw std::logic_error("handler failed"); });
  engine.on(Events::EXCEPTION_RAISED, [&](Engine&) { ++handled; });
  std::vector<int> data{1};
  engine.run(data, 2);
  EXPECT_EQ(handled, 1);
  EXPECT_EQ(r.str(), "S0 ES1 GBS0 GBC0 IS1 IC1 EC1");
}

TEST(EngineTest, ExceptionFromExceptionHandlerLeavesRunOnce) {
  Engine engine([](Engine&, const int&) -> Value { throw std::runtime_error("first"); });
  int calls = 0;
  engine.on(Events::EXCEPTION_RAISED, [&](Engine&) {
    ++calls;
    throw std::runtime_error("from handler");
  });
  std::vector<int> data{1};
  try {
    engine.run(data, 1);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "from handler");
  }
  EXPECT_EQ(calls, 1);
}

TEST(EngineTest, WrongBatchTypeNamesBothTypes) {
  Engine engine([](Engine&, const std::string& s) -> Value { return static_cast<double>(s.size()); });
  std::vector<int> data{1};
  try {
    engine.run(data, 1);
    FAIL();
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("std::__cxx11::basic_string"), std::string::npos) << what;
    EXPECT_NE(what.find("yields int"), std::string::npos) << what;
  }
}

TEST(EngineTest, EmptyDataRunsEpochsWithoutIterations) {
  Engine engine = counting_engine();
  Recorder r;
  r.attach(engine);
  std::vector<int> data;
  engine.run(data, 2);
  EXPECT_EQ(r.str(), "S0 ES1 EC1 ES2 EC2 C2");
  EXPECT_THROW(engine.run(data, RunOptions().max_iters(3)), UsageError);
}

TEST(EngineTest, RunOptionsAreChecked) {
  Engine engine = counting_engine();
  std::vector<int> data{1};
  EXPECT_THROW(engine.run(data, RunOptions().max_epochs(2).max_iters(3)), UsageError);
  EXPECT_THROW(engine.run(data, RunOptions().max_epochs(0)), UsageError);
  EXPECT_THROW(engine.run(data, RunOptions().epoch_length(0)), UsageError);
  engine.run(data, 2);
  EXPECT_THROW(engine.run(data, RunOptions().max_iters(5)), UsageError);  // switching modes needs a reset
}

TEST(EngineTest, FinishedRunWithLargerMaxEpochsGoesOn) {
  std::vector<int> processed;
  Engine engine = counting_engine(&processed);
  std::vector<int> data{1, 2};
  engine.run(data, 2);
  engine.run(data, 3);  // ignite: epochs 3..3
  EXPECT_EQ(engine.state().epoch, 3);
  EXPECT_EQ(engine.state().iteration, 6);
  engine.run(data);  // finished, no new bound: a fresh run of 1 epoch
  EXPECT_EQ(engine.state().epoch, 1);
  EXPECT_EQ(engine.state().iteration, 2);
}

TEST(EngineTest, TerminateThenRunContinuesFromTheNextBatch) {
  std::vector<int> processed;
  Engine engine = counting_engine(&processed);
  auto h = engine.on(Events::ITERATION_COMPLETED.once(3), [](Engine& e) { e.terminate(); });
  std::vector<int> data{1, 2};
  engine.run(data, 3);
  EXPECT_EQ(engine.state().iteration, 3);
  h.remove();
  engine.run(data, 3);
  EXPECT_EQ(engine.state().iteration, 6);
  EXPECT_EQ(processed, (std::vector<int>{1, 2, 1, 2, 1, 2}));
}

}  // namespace
