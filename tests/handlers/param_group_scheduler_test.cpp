// ParamGroupScheduler (kindling/handlers/schedulers/param_group_scheduler.h) on a real Engine:
// two parameter groups on their own schedules, one state_dict that resumes both, a simulation
// that leaves everything as it was, and misuse refused with what was given.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/schedulers/param_group_scheduler.h"
#include "support/errors.h"

namespace kh = kindling::handlers;
namespace optim = torch::optim;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace param_group_scheduler_test {

struct TwoGroups {  // an SGD over two groups of one parameter each
  TwoGroups()
      : opt(std::vector<optim::OptimizerParamGroup>{optim::OptimizerParamGroup({at::zeros({1}).requires_grad_()}),
                                                    optim::OptimizerParamGroup({at::zeros({1}).requires_grad_()})},
            optim::SGDOptions(0.5)) {}
  double lr(std::size_t g) const { return opt.param_groups()[g].options().get_lr(); }
  optim::SGD opt;
};

std::shared_ptr<kh::ParamGroupScheduler> schedule(TwoGroups& t) {
  using Points = std::vector<std::pair<int64_t, double>>;
  auto backbone = std::make_shared<kh::PiecewiseLinear>(t.opt, "lr", Points{{0, 0.0}, {4, 0.4}}, false, 0);
  auto head = std::make_shared<kh::PiecewiseLinear>(t.opt, "lr", Points{{0, 1.0}, {2, 0.0}}, false, 1);
  return std::make_shared<kh::ParamGroupScheduler>(std::vector<std::shared_ptr<kh::ParamScheduler>>{backbone, head},
                                                   std::vector<std::string>{"backbone", "head"});
}

TEST(ParamGroupSchedulerTest, StepsEveryGroupOnItsScheduleAndResumes) {
  TwoGroups t;
  auto both = schedule(t);
  Engine trainer([](Engine&, const int& b) { return Value(static_cast<double>(b)); });
  both->attach(trainer);
  std::vector<double> backbone, head;
  trainer.on(Events::ITERATION_COMPLETED, [&](Engine&) { backbone.push_back(t.lr(0)), head.push_back(t.lr(1)); });
  trainer.run(std::vector<int>(3, 0), 1);
  EXPECT_EQ(backbone, (std::vector<double>{0.0, 0.1, 0.2}));
  EXPECT_EQ(head, (std::vector<double>{1.0, 0.5, 0.0}));
  // Another pair of schedulers restored from the state continues at event 3.
  TwoGroups u;
  auto resumed = schedule(u);
  resumed->load_state_dict(both->state_dict());
  resumed->step();
  EXPECT_NEAR(u.lr(0), 0.3, 1e-12);
  EXPECT_NEAR(u.lr(1), 0.0, 1e-12);
}

TEST(ParamGroupSchedulerTest, SimulationLeavesTheSchedulersAndTheOptimizerAsTheyWere) {
  TwoGroups t;
  auto both = schedule(t);
  const auto values = kh::ParamGroupScheduler::simulate_values(3, both->schedulers());
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values[2].first, 2);
  EXPECT_NEAR(values[2].second[0][0], 0.2, 1e-12);
  EXPECT_NEAR(values[2].second[1][0], 0.0, 1e-12);
  EXPECT_EQ(t.lr(0), 0.5);  // the optimizer's own lr, untouched
  EXPECT_EQ(both->schedulers()[0]->event_index(), 0);
}

TEST(ParamGroupSchedulerTest, MisuseIsRefusedWithWhatWasGiven) {
  TwoGroups t;
  auto one = std::make_shared<kh::PiecewiseLinear>(t.opt, "lr", std::vector<std::pair<int64_t, double>>{{0, 1.0}});
  EXPECT_NE(error_of([&] {
              kh::ParamGroupScheduler bad({one}, {"a", "b"});
            }).find("1 schedulers but 2 names"),
            std::string::npos);
  EXPECT_NE(error_of([] { kh::ParamGroupScheduler bad({}); }).find("give at least one scheduler"), std::string::npos);
  auto both = schedule(t);
  kh::ParamGroupScheduler renamed(both->schedulers(), {"head", "backbone"});
  EXPECT_NE(error_of([&] {
              renamed.load_state_dict(both->state_dict());
            }).find("name of scheduler 0 is 'backbone' in the state_dict, expected 'head'"),
            std::string::npos);
}

}  // namespace param_group_scheduler_test
