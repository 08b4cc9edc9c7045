// Parameter schedulers driven through a real Engine: values at every event against ignite's
// formulas (written here independently) and its documented sequences, simulate_values, state
// dict round trips, a LibTorch StepLR saved as torch's state, and argument errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/schedulers/step_lr.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "kindling/handlers/schedulers/param_scheduler.h"

namespace {

namespace kh = kindling::handlers;
namespace optim = torch::optim;
using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using Schedulers = std::vector<std::shared_ptr<kh::ParamScheduler>>;
using Milestones = std::vector<std::pair<int64_t, double>>;

const double kPi = std::acos(-1.0);
// ignite's formulas at progress t of a cycle.
double triangle(double start, double end, double t) { return end + (start - end) * std::abs(t - 0.5) * 2; }
double cosine(double start, double end, double t) { return start + (end - start) * (1 - std::cos(kPi * t)) / 2; }

struct Rig {  // a tiny model and its SGD
  explicit Rig(double lr = 0.0, double momentum = 0.0)
      : model(2, 1), opt(model->parameters(), optim::SGDOptions(lr).momentum(momentum)) {}
  torch::nn::Linear model;
  optim::SGD opt;
};
double lr(const optim::Optimizer& o, std::size_t group = 0) { return o.param_groups()[group].options().get_lr(); }

// Attaches `s` (ITERATION_STARTED) to an engine over `n` ints and returns the lr seen at each ITERATION_COMPLETED.
std::vector<double> run_lrs(const std::shared_ptr<kh::ParamScheduler>& s, const optim::Optimizer& o, int n,
                            int epochs = 1) {
  Engine e([](Engine&, const int& b) -> Value { return b; });
  s->attach(e);
  std::vector<double> out;
  e.on(Events::ITERATION_COMPLETED, [&](Engine&) { out.push_back(lr(o)); });
  e.run(std::vector<int>(n, 0), epochs);
  return out;
}
std::vector<double> values_of(const kh::SimulatedValues& sim) {
  std::vector<double> out;
  for (std::size_t i = 0; i < sim.size(); ++i) {
    EXPECT_EQ(sim[i].first, static_cast<int64_t>(i));
    out.push_back(sim[i].second);
  }
  return out;
}
void expect_values(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-9) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at event " << i;
}
// Expects f to throw kindling::UsageError with `part` in its message.
template <typename F>
void expect_error(F f, const char* part) {
  std::string message = "(no UsageError)";
  try {
    f();
  } catch (const UsageError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(part), std::string::npos) << message;
}
// ignite's checks of a warm-up from 0.01: the run equals the simulation, the warm-up ends at `end`
// on event duration - 1, and `next` follows.
void expect_warmup(const std::vector<double>& lrs, const kh::SimulatedValues& sim, double end, int64_t duration,
                   double next) {
  expect_values(lrs, values_of(sim), 1e-12);
  EXPECT_NEAR(lrs[0], 0.01, 1e-12);
  EXPECT_NEAR(lrs[duration - 1], end, 1e-12) << duration;
  EXPECT_NEAR(lrs[duration], next, 1e-12) << duration;
}
kindling::StateDict pickled(const kindling::StateDict& sd) {
  return torch::pickle_load(torch::pickle_save(c10::IValue(sd))).toGenericDict();
}

// Python's ExponentialLR (chainable form), which LibTorch 1.13 does not have.
class ExponentialLR : public optim::LRScheduler {
 public:
  ExponentialLR(optim::Optimizer& o, double gamma) : LRScheduler(o), gamma_(gamma) {}

 private:
  std::vector<double> get_lrs() override {
    std::vector<double> lrs = get_current_lrs();
    for (double& v : lrs) v *= step_count_ > 0 ? gamma_ : 1.0;
    return lrs;
  }
  double gamma_;
};

// ignite's FakeParamScheduler: returns `values` at every event.
class Constant : public kh::ParamScheduler {
 public:
  using ParamScheduler::ParamScheduler;
  std::vector<double> get_param() override { return values; }
  std::vector<double> values{0.5};
};

TEST(CyclicalSchedulerTest, LinearCyclesAndCycleMult) {
  Rig r;
  expect_values(run_lrs(std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "lr", 0.0, 1.0, 4), r.opt, 4),
                {0.0, 0.5, 1.0, 0.5});  // ignite's docstring
  std::vector<double> want;
  for (int i = 0; i < 20; ++i) want.push_back(triangle(1, 0, (i % 10) / 10.0));
  expect_values(run_lrs(std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "lr", 1, 0, 10), r.opt, 10, 2), want);
  want.clear();  // cycle_mult 2: a cycle of 10 events, then one of 20
  for (int t = 0; t < 10; ++t) want.push_back(triangle(1, 0, t / 10.0));
  for (int t = 0; t < 20; ++t) want.push_back(triangle(1, 0, t / 20.0));
  auto doubling =
      std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "lr", 1, 0, 10, kh::CyclicalOptions().cycle_mult(2));
  expect_values(run_lrs(doubling, r.opt, 10, 3), want);
  EXPECT_EQ(doubling->cycle(), 1);
  EXPECT_EQ(doubling->cycle_size(), 20);
}

TEST(CyclicalSchedulerTest, StartAndEndValueMultipliers) {
  Rig r;
  const auto options = kh::CyclicalOptions().start_value_mult(0.5).end_value_mult(0.25);
  std::vector<double> linear, cos;  // cycle k (4 events) from 0.5^k, through or to 0.2 * 0.25^k
  for (int e = 0; e < 12; ++e) {
    linear.push_back(triangle(std::pow(0.5, e / 4), 0.2 * std::pow(0.25, e / 4), (e % 4) / 4.0));
    cos.push_back(cosine(std::pow(0.5, e / 4), 0.2 * std::pow(0.25, e / 4), (e % 4) / 4.0));
  }
  expect_values(run_lrs(std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "lr", 1.0, 0.2, 4, options), r.opt, 12),
                linear);
  expect_values(run_lrs(std::make_shared<kh::CosineAnnealingScheduler>(r.opt, "lr", 1.0, 0.2, 4, options), r.opt, 12),
                cos);
}

TEST(CyclicalSchedulerTest, WarmupBetweenCycles) {
  Rig r;
  // ignite's test: monotonic 1 -> 0 over 10 events, then 5 warm-up events back towards 1.
  const auto warm = kh::CyclicalOptions().warmup_duration(5).monotonic(true);
  expect_values(run_lrs(std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "lr", 1, 0, 10, warm), r.opt, 10, 2),
                {1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 0.9, 0.8, 0.7, 0.6});
  std::vector<double> want{1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.2, 0.4, 0.6, 0.8};
  for (int t = 0; t < 15; ++t) want.push_back(1.0 - t / 20.0);  // cycle_mult 2: 20 events, warm-up 10
  const auto warm_doubling = kh::CyclicalOptions(warm).cycle_mult(2);
  expect_values(
      run_lrs(std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "lr", 1, 0, 10, warm_doubling), r.opt, 10, 3), want);
  // Cosine 0 -> 1 over 10 events with a warm-up of 2 (1.0 at the cycle's end, then 0.5).
  want.clear();
  for (int e = 0; e < 22; ++e) want.push_back(e == 10 ? 1.0 : e == 11 ? 0.5 : cosine(0, 1, (e % 12) / 10.0));
  const auto warm2 = kh::CyclicalOptions().warmup_duration(2);
  expect_values(run_lrs(std::make_shared<kh::CosineAnnealingScheduler>(r.opt, "lr", 0, 1, 10, warm2), r.opt, 11, 2),
                want);
  expect_values(values_of(kh::CosineAnnealingScheduler::simulate_values(22, "lr", 0, 1, 10, warm2)), want);
  expect_values(run_lrs(std::make_shared<kh::CosineAnnealingScheduler>(r.opt, "lr", 0.0, 1.0, 4), r.opt, 4),
                {0.0, 0.1464466, 0.5, 0.8535534}, 1e-6);  // ignite's docstring
}

TEST(PiecewiseLinearTest, InterpolatesAndStaysAfterTheLastMilestone) {
  Rig r;
  auto s = std::make_shared<kh::PiecewiseLinear>(r.opt, "lr", Milestones{{1, 1.0}, {3, 0.8}, {5, 0.2}});
  expect_values(run_lrs(s, r.opt, 9), {1.0, 1.0, 0.9, 0.8, 0.5, 0.2, 0.2, 0.2, 0.2});  // ignite's docstring
  // A jump (20 -> 21) and a flat part, as in ignite's docstring.
  const Milestones mv{{10, 0.5}, {20, 0.45}, {21, 0.3}, {30, 0.1}, {40, 0.1}};
  const std::vector<double> sim = values_of(kh::PiecewiseLinear::simulate_values(45, "lr", mv));
  for (int e = 0; e < 45; ++e) {
    const double want = e < 10 ? 0.5 : e < 20 ? 0.5 - 0.05 * (e - 10) / 10 : e < 30 ? 0.3 - 0.2 * (e - 21) / 9 : 0.1;
    EXPECT_NEAR(sim[e], e == 20 ? 0.45 : want, 1e-12) << e;
  }
}

TEST(ConcatSchedulerTest, SwitchesAfterEachDuration) {
  Rig r;
  auto linear = std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "lr", 0.0, 1.0, 8);
  auto anneal = std::make_shared<kh::CosineAnnealingScheduler>(r.opt, "lr", 1.0, 0.2, 4);
  const kh::SimulatedValues sim = kh::ConcatScheduler::simulate_values(12, {linear, anneal}, {4});
  std::vector<double> want{0.0, 0.25, 0.5, 0.75};  // ignite's docstring, then the cosine cycles again
  for (int i = 0; i < 8; ++i) want.push_back(cosine(1.0, 0.2, (i % 4) / 4.0));
  auto concat = std::make_shared<kh::ConcatScheduler>(Schedulers{linear, anneal}, std::vector<int64_t>{4}, true);
  expect_values(run_lrs(concat, r.opt, 12), want);
  expect_values(values_of(sim), want);  // the simulation left the schedulers as they were
  ASSERT_EQ(concat->param_history().size(), 12u);
  EXPECT_NEAR(concat->param_history()[5][0], 0.8828427, 1e-6);
  // Three schedulers: 3 events, 2 events, then the last one for ever.
  Rig q;
  auto three = std::make_shared<kh::ConcatScheduler>(
      Schedulers{std::make_shared<kh::LinearCyclicalScheduler>(q.opt, "lr", 1, 0, 10),
                 std::make_shared<kh::CosineAnnealingScheduler>(q.opt, "lr", 0, 1, 10),
                 std::make_shared<kh::LinearCyclicalScheduler>(q.opt, "lr", 0, 1, 4)},
      std::vector<int64_t>{3, 2});
  want = {triangle(1, 0, 0), triangle(1, 0, 0.1), triangle(1, 0, 0.2), cosine(0, 1, 0), cosine(0, 1, 0.1)};
  for (int t = 0; t < 6; ++t) want.push_back(triangle(0, 1, (t % 4) / 4.0));
  expect_values(run_lrs(three, q.opt, 11), want);
  EXPECT_EQ(three->scheduler_index(), 2u);
}

TEST(LRSchedulerTest, WrapsLibTorchStepLR) {
  Rig r(0.1);
  auto step = std::make_shared<optim::StepLR>(r.opt, 3, 0.1);
  const std::vector<double> want{0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.001};  // ignite's docstring
  expect_values(values_of(kh::LRScheduler::simulate_values(8, r.opt, step)), want, 1e-12);
  EXPECT_DOUBLE_EQ(lr(r.opt), 0.1);  // simulate_values restored the lr (and the step count: see below)
  expect_values(run_lrs(std::make_shared<kh::LRScheduler>(r.opt, step), r.opt, 8), want, 1e-12);
}

// ignite's MNIST save/resume example steps torch's StepLR at EPOCH_COMPLETED and checkpoints
// it: after 3 epochs torch's state_dict says last_epoch 3, _step_count 4, _last_lr [0.00125]
// (torch 2.x, step_size 1, gamma 0.5, lr 0.01). LibTorch's StepLR, stepped once more at the
// start (torch's constructor's step), gives the same rates and, saved, the same numbers. A
// kindling scheduler passed as a std::shared_ptr, as metrics are, is saved too.
TEST(LRSchedulerTest, AStepLRSteppedByHandIsSavedAsTorchsState) {
  Rig r(0.01);
  auto step_lr = std::make_shared<optim::StepLR>(r.opt, 1, 0.5);
  step_lr->step();
  Engine trainer([](Engine&, const int&) -> Value { return 0.0; });
  trainer.on(Events::EPOCH_COMPLETED, [&](Engine&) { step_lr->step(); });
  trainer.run(std::vector<int>{1, 2}, 3);
  const kindling::StateDict saved = kh::stateful(step_lr)->state_dict();
  EXPECT_EQ(saved.at("last_epoch").toInt(), 3);
  EXPECT_EQ(saved.at("_step_count").toInt(), 4);
  EXPECT_EQ(saved.at("_last_lr").toDoubleList().vec(), std::vector<double>{0.00125});
  Rig resumed(0.00125);  // the optimizer's state restored with it
  auto again = std::make_shared<optim::StepLR>(resumed.opt, 1, 0.5);
  kh::stateful(again)->load_state_dict(saved);
  again->step();
  EXPECT_DOUBLE_EQ(lr(resumed.opt), 0.000625);
  EXPECT_EQ(kh::stateful(again)->state_dict().at("last_epoch").toInt(), 4);
  kh::Objects to_save{{"lr_scheduler", kh::stateful(std::make_shared<kh::LRScheduler>(r.opt, step_lr))}};
  // The handler's state keeps ignite's LRScheduler's count (its events; here LibTorch's steps).
  EXPECT_EQ(to_save[0].second->state_dict().at("lr_scheduler").toGenericDict().at("last_epoch").toInt(), 4);
}

TEST(WarmupTest, LibTorchSchedulerAsIgnitesDocstringAndTests) {
  Rig r(0.1);
  kh::SimulatedValues sim(8);
  auto s = kh::create_lr_scheduler_with_warmup(r.opt, std::make_shared<ExponentialLR>(r.opt, 0.98), 0.0, 3, 0.1, false,
                                               &sim);
  const std::vector<double> want{0.0, 0.05, 0.1, 0.098, 0.09604, 0.0941192, 0.092236816, 0.09039207968};
  expect_values(values_of(sim), want, 1e-12);
  expect_values(run_lrs(s, r.opt, 8), want, 1e-12);
  // ignite's cases (end value, duration, the value after the warm-up): optimizer lr 0.2, gamma 0.98.
  using Case = std::tuple<std::optional<double>, int64_t, double>;
  for (const auto& [end, duration, next] : std::vector<Case>{
           {0.05, 10, 0.2}, {0.05, 2, 0.2}, {0.2, 10, 0.196}, {0.2, 2, 0.196}, {std::nullopt, 10, 0.196}}) {
    Rig q(0.2);
    kh::SimulatedValues values(200);
    auto w = kh::create_lr_scheduler_with_warmup(q.opt, std::make_shared<ExponentialLR>(q.opt, 0.98), 0.01, duration,
                                                 end, false, &values);
    expect_warmup(run_lrs(w, q.opt, 10, 20), values, end.value_or(0.2), duration, next);
  }
  // ignite's test with a real model: StepLR(step 2, gamma 0.97) from lr 0.01, warm-up to 0.02 over 5 events.
  Rig m(0.01);
  kh::SimulatedValues out(50);
  kh::create_lr_scheduler_with_warmup(m.opt, std::make_shared<optim::StepLR>(m.opt, 2, 0.97), 0.0, 5, 0.02, false,
                                      &out);
  EXPECT_DOUBLE_EQ(out[0].second, 0.0);
  EXPECT_DOUBLE_EQ(out[4].second, 0.02);
  EXPECT_DOUBLE_EQ(out[5].second, 0.01);
  EXPECT_NEAR(out[7].second, 0.01 * 0.97, 1e-15);
}

TEST(WarmupTest, ParamSchedulerWithHistory) {
  // ignite's cases C and D (end value, duration, next value): LinearCyclical 0.8 -> 0 over 10 events after.
  using Case = std::tuple<double, int64_t, double>;
  for (const auto& [end, duration, next] :
       std::vector<Case>{{0.05, 10, 0.8}, {0.05, 2, 0.8}, {0.8, 10, 0.64}, {0.8, 2, 0.64}}) {
    Rig q;
    kh::SimulatedValues values(200);
    auto cyclical = std::make_shared<kh::LinearCyclicalScheduler>(q.opt, "lr", 0.8, 0, 10);
    auto w = kh::create_lr_scheduler_with_warmup(cyclical, 0.01, duration, end, true, &values);
    const std::vector<double> lrs = run_lrs(w, q.opt, 10, 20);
    expect_warmup(lrs, values, end, duration, next);
    ASSERT_EQ(w->param_history().size(), lrs.size());
    for (std::size_t i = 0; i < lrs.size(); ++i) EXPECT_DOUBLE_EQ(w->param_history()[i][0], lrs[i]);
  }
}

TEST(ParamSchedulerTest, OtherParametersGroupsAndTheGenericSimulation) {
  Rig r(0.1, 0.9);
  auto m = std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "momentum", 0.9, 0.5, 4);
  for (int t = 0; t < 4; ++t) {
    m->step();
    EXPECT_NEAR(static_cast<optim::SGDOptions&>(r.opt.param_groups()[0].options()).momentum(),
                triangle(0.9, 0.5, t / 4.0), 1e-12);
  }
  torch::nn::Linear lin(2, 1);
  optim::RMSprop rms(lin->parameters(), optim::RMSpropOptions(0.01));
  kh::PiecewiseLinear(rms, "weight_decay", Milestones{{0, 0.3}}).step();
  EXPECT_DOUBLE_EQ(static_cast<optim::RMSpropOptions&>(rms.param_groups()[0].options()).weight_decay(), 0.3);
  // Two groups: one group alone, both, or one value each.
  optim::SGD two({optim::OptimizerParamGroup({lin->weight}),
                  optim::OptimizerParamGroup({lin->bias}, std::make_unique<optim::SGDOptions>(1.0))},
                 optim::SGDOptions(0.1));
  kh::PiecewiseLinear(two, "lr", Milestones{{0, 0.0}, {4, 0.4}}, false, 1).step();
  EXPECT_DOUBLE_EQ(lr(two, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr(two, 1), 0.0);
  Constant c(two, "lr");
  c.values = {0.3, 0.7};
  c.step();
  EXPECT_DOUBLE_EQ(lr(two, 0), 0.3);
  EXPECT_DOUBLE_EQ(lr(two, 1), 0.7);
  c.values = {1, 2, 3};
  expect_error([&] { c.step(); }, "size of value is different");
  const kh::SimulatedValues sim = kh::ParamScheduler::simulate_values(5, [](optim::Optimizer& o) {
    return std::make_shared<kh::PiecewiseLinear>(o, "lr", Milestones{{0, 0.0}, {4, 1.0}});
  });
  expect_values(values_of(sim), {0.0, 0.25, 0.5, 0.75, 1.0});
  expect_values(values_of(kh::LinearCyclicalScheduler::simulate_values(4, "lr", 1, 0, 2)), {1, 0, 1, 0});
}

TEST(ParamSchedulerStateDictTest, ResumeMidCycleGivesTheSameValues) {
  auto check = [](int before, auto make) {
    Rig a(0.1), b(0.1);
    auto s = make(a.opt);
    for (int i = 0; i < before; ++i) s->step();
    const kindling::StateDict sd = pickled(s->state_dict());
    b.opt.param_groups()[0].options().set_lr(lr(a.opt));  // as restoring the optimizer's state would
    std::vector<double> want, got;
    auto t = make(b.opt);
    t->load_state_dict(sd);
    for (int i = 0; i < 12; ++i) {
      s->step();
      want.push_back(lr(a.opt));
      t->step();
      got.push_back(lr(b.opt));
    }
    expect_values(got, want, 0);
    return sd;
  };
  const auto opts = kh::CyclicalOptions().cycle_mult(2).start_value_mult(0.5).warmup_duration(2);
  check(7,
        [&](optim::Optimizer& o) { return std::make_shared<kh::CosineAnnealingScheduler>(o, "lr", 1, 0.1, 4, opts); });
  check(5, [](optim::Optimizer& o) {
    return std::make_shared<kh::PiecewiseLinear>(o, "lr", Milestones{{2, 1}, {9, 0}});
  });
  const auto lr_sd = check(4, [](optim::Optimizer& o) {
    return std::make_shared<kh::LRScheduler>(o, std::make_shared<optim::StepLR>(o, 3, 0.5));
  });
  EXPECT_EQ(lr_sd.at("lr_scheduler").toGenericDict().at("last_epoch").toInt(), 4);
  const auto sd = check(5, [](optim::Optimizer& o) {
    return std::make_shared<kh::ConcatScheduler>(
        Schedulers{std::make_shared<kh::LinearCyclicalScheduler>(o, "lr", 1, 0, 10),
                   std::make_shared<kh::CosineAnnealingScheduler>(o, "lr", 0, 1, 10)},
        std::vector<int64_t>{10});
  });
  ASSERT_EQ(sd.at("durations").toList().size(), 1u);  // ignite's keys and values
  EXPECT_EQ(sd.at("durations").toList().get(0).toInt(), 10);
  EXPECT_EQ(sd.at("_current_duration").toInt(), 5);
  EXPECT_EQ(sd.at("_scheduler_index").toInt(), 0);
  EXPECT_EQ(sd.at("event_index").toInt(), 5);
  EXPECT_EQ(sd.at("param_name").toStringRef(), "lr");
  EXPECT_TRUE(sd.at("param_group_index").isNone());
  EXPECT_EQ(sd.at("schedulers").toList().get(0).toGenericDict().at("cycle_size").toInt(), 10);
}

TEST(ParamSchedulerStateDictTest, LoadErrorsChangeNothing) {
  Rig r;
  auto c = std::make_shared<Constant>(r.opt, "lr");
  expect_error([&] { c->load_state_dict(kindling::new_state_dict()); },
               "required state attribute 'event_index' is absent");
  expect_error([&] { c->load_state_dict(Constant(r.opt, "momentum").state_dict()); }, "'momentum'");
  auto l = std::make_shared<kh::LinearCyclicalScheduler>(r.opt, "lr", 1, 0, 10);
  kh::ConcatScheduler concat({l, std::make_shared<kh::CosineAnnealingScheduler>(r.opt, "lr", 0, 1, 10)}, {10});
  concat.step();
  kindling::StateDict bad = concat.state_dict().copy();
  bad.insert_or_assign("schedulers", c10::impl::GenericList(c10::AnyType::get()));
  expect_error([&] { concat.load_state_dict(bad); }, "holds 0 state dicts of concatenated schedulers");
  c10::impl::GenericList list(c10::AnyType::get());  // the second scheduler's state is unusable
  list.push_back(kh::LinearCyclicalScheduler(r.opt, "lr", 1, 0, 10).state_dict());
  list.push_back(kindling::new_state_dict());
  bad.insert_or_assign("schedulers", list);
  expect_error([&] { concat.load_state_dict(bad); }, "'start_value' is absent");
  EXPECT_EQ(l->event_index(), 1);  // the first scheduler's load was undone
}

TEST(ParamSchedulerTest, ArgumentErrors) {
  Rig r, other;
  expect_error([&] { kh::LinearCyclicalScheduler(r.opt, "lr", 1, 0, 1); }, "larger than 1");
  expect_error([&] { kh::CosineAnnealingScheduler(r.opt, "lr", 1, 0, 0); }, "larger than 1");
  expect_error([&] { kh::LinearCyclicalScheduler(r.opt, "lr", 1, 0, 2, kh::CyclicalOptions().warmup_duration(1)); },
               "monotonic(true)");
  expect_error([&] { kh::CosineAnnealingScheduler(r.opt, "lr", 1, 0, 4, kh::CyclicalOptions().monotonic(true)); },
               "LinearCyclicalScheduler only");
  expect_error([&] { Constant(r.opt, "betas"); }, "supported: \"lr\"");
  optim::Adam adam(r.model->parameters(), optim::AdamOptions(0.1));
  expect_error([&] { Constant(adam, "momentum"); }, "\"momentum\" is not an option");
  expect_error([&] { Constant(r.opt, "lr", false, 1); }, "param_group_index is 1");
  expect_error([&] { kh::PiecewiseLinear(r.opt, "lr", Milestones{}); }, "at least one");
  expect_error([&] { kh::PiecewiseLinear(r.opt, "lr", Milestones{{5, 1}, {3, 0}}); }, "increasing");
  auto a = std::make_shared<Constant>(r.opt, "lr");
  expect_error([&] { kh::ConcatScheduler({a}, {}); }, "more than one");
  expect_error([&] { kh::ConcatScheduler({a, a}, {1, 2}); }, "incorrect number");
  expect_error([&] { kh::ConcatScheduler({a, a}, {0}); }, "durations[0] is 0");
  expect_error([&] { kh::ConcatScheduler({a, nullptr}, {1}); }, "index 1 is null");
  expect_error([&] { kh::ConcatScheduler({a, std::make_shared<Constant>(other.opt, "lr")}, {1}); }, "same optimizer");
  expect_error([&] { kh::ConcatScheduler({a, std::make_shared<Constant>(r.opt, "momentum")}, {1}); }, "param_name");
  expect_error([&] { kh::create_lr_scheduler_with_warmup(a, 0.0, 1); }, "at least 2 events");
  expect_error([&] { kh::LRScheduler(r.opt, nullptr); }, "lr_scheduler is null");
  Engine e([](Engine&, const int& b) -> Value { return b; });
  Constant on_stack(r.opt, "lr");
  expect_error([&] { on_stack.attach(e); }, "std::shared_ptr");
}

}  // namespace
