// The state schedulers (kindling/handlers/schedulers/state_param_scheduler.h): their values
// equal ignite 0.5.5's simulate_values of the same schedules (tests/handlers/
// ignite_state_schedulers.py, where the build's Python has ignite: the LibTorch 2.15 venv), a
// real Engine sees them in state().attributes at each event, a state_dict resumes the schedule,
// and misuse is refused with what was given.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/schedulers/state_param_scheduler.h"
#include "support/errors.h"
#include "support/multiprocess.h"

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace state_param_scheduler_test {

constexpr int64_t kEvents = 12;

// The schedules of ignite_state_schedulers.py, by its names.
std::map<std::string, std::shared_ptr<kh::StateParamScheduler>> schedules() {
  return {
      {"exp", std::make_shared<kh::ExpStateScheduler>(2.0, 0.9, "x")},
      {"step", std::make_shared<kh::StepStateScheduler>(1.0, 0.5, 3, "x")},
      {"multistep", std::make_shared<kh::MultiStepStateScheduler>(1.0, 0.1, std::vector<int64_t>{2, 5, 9}, "x")},
      {"piecewise", std::make_shared<kh::PiecewiseLinearStateScheduler>(
                        std::vector<std::pair<int64_t, double>>{{2, 1.0}, {6, 3.0}, {6, 0.5}, {10, 0.0}}, "x")},
      {"lambda", std::make_shared<kh::LambdaStateScheduler>(
                     [](int64_t e) { return Value(0.5 + static_cast<double>(e * e) / 10); }, "x")},
  };
}

TEST(StateParamSchedulerTest, EqualIgnite055SimulatedValues) {
  const auto r = kindling::testing::run_command(
      {KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/handlers/ignite_state_schedulers.py", std::to_string(kEvents)});
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  ASSERT_TRUE(r.ok()) << kindling::testing::describe({r});
  std::map<std::string, std::vector<double>> ignite;
  std::istringstream lines(r.out);
  for (std::string name, text; lines >> name >> text;) {
    std::stringstream items(text);
    for (std::string item; std::getline(items, item, ',');) {
      if (name != "IGNITE") ignite[name].push_back(std::stod(item));
    }
  }
  auto mine = schedules();
  ASSERT_EQ(ignite.size(), mine.size()) << r.out;
  for (auto& [name, scheduler] : mine) {
    const auto values = scheduler->simulate_values(kEvents);
    ASSERT_EQ(values.size(), ignite.at(name).size()) << name;
    for (std::size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(values[i].first, static_cast<int64_t>(i));
      EXPECT_NEAR(values[i].second.number(), ignite.at(name)[i], 1e-12) << name << " at event " << i + 1;
    }
    EXPECT_EQ(scheduler->event_index(), 0) << name << ": simulate_values left the scheduler as it was";
  }
}

TEST(StateParamSchedulerTest, AnEngineSeesTheValueAtEachEventAndAResumeContinues) {
  auto s = std::make_shared<kh::ExpStateScheduler>(1.0, 0.5, "temperature", /*save_history=*/true, /*create_new=*/true);
  Engine trainer([](Engine& e, const int&) { return Value(e.state().attributes.at("temperature").number()); });
  s->attach(trainer, Events::ITERATION_STARTED);  // set before each iteration reads it
  std::vector<double> seen;
  trainer.on(Events::ITERATION_COMPLETED,
             [&](Engine& e) { seen.push_back(e.state().attributes.at("temperature").number()); });
  std::vector<int> data(4, 0);
  trainer.run(data, 1);
  EXPECT_EQ(seen, (std::vector<double>{0.5, 0.25, 0.125, 0.0625}));
  ASSERT_EQ(s->param_history().size(), 4u);
  EXPECT_EQ(s->param_history()[3].number(), 0.0625);
  // A new scheduler restored from the state continues at event 5.
  auto resumed = std::make_shared<kh::ExpStateScheduler>(1.0, 0.5, "temperature");
  resumed->load_state_dict(s->state_dict());
  EXPECT_EQ(resumed->event_index(), 4);
  EXPECT_EQ(resumed->simulate_values(1)[0].second.number(), 0.5);  // simulate starts at event 1 ...
  Engine other([](Engine&, const int&) { return Value(0.0); });
  other.state().attributes["temperature"] = Value();
  (*resumed)(other);
  EXPECT_EQ(other.state().attributes.at("temperature").number(), 1.0 / 32);  // ... the run at event 5
}

TEST(StateParamSchedulerTest, MisuseIsRefusedWithWhatWasGiven) {
  EXPECT_NE(error_of([] { kh::StepStateScheduler bad(1.0, 0.5, 0, "x"); }).find("step_size must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              kh::PiecewiseLinearStateScheduler bad(std::vector<std::pair<int64_t, double>>{{5, 1.0}, {3, 0.0}}, "x");
            }).find("milestones must not decrease, but 3 follows 5"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              kh::MultiStepStateScheduler bad(1.0, 0.5, {4, 4}, "x");
            }).find("milestones must increase"),
            std::string::npos);
  EXPECT_NE(error_of([] { kh::ExpStateScheduler bad(1.0, 0.5, ""); }).find("param_name"), std::string::npos);
  Engine trainer([](Engine&, const int&) { return Value(0.0); });
  trainer.state().attributes["taken"] = Value(1.0);
  auto s = std::make_shared<kh::ExpStateScheduler>(1.0, 0.5, "taken", false, /*create_new=*/true);
  EXPECT_NE(error_of([&] { s->attach(trainer); }).find("the attribute 'taken' already exists in the engine's state"),
            std::string::npos);
  auto other = std::make_shared<kh::ExpStateScheduler>(1.0, 0.5, "y");
  EXPECT_NE(error_of([&] {
              other->load_state_dict(s->state_dict());
            }).find("the state_dict is of a scheduler of 'taken', this one sets 'y'"),
            std::string::npos);
}

}  // namespace state_param_scheduler_test
