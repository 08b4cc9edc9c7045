// ReduceLROnPlateauScheduler: which calls reduce the lr, worked out by hand in the comments
// (patience, cooldown, threshold rel / abs, min_lr, eps, mode max, NaN), ignite's documented
// sequence through real engines, torch's own ReduceLROnPlateau on a long sequence, the state
// through a Checkpoint, and the errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/handlers/schedulers/reduce_lr_on_plateau.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace {

namespace kh = kindling::handlers;
namespace optim = torch::optim;
using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;
using PlateauOptions = kh::ReduceLROnPlateauOptions;

// The lr after each metric value, from a fresh one-group optimizer at lr 1 (simulate_values).
std::vector<double> plateau_lrs(const std::vector<double>& metrics, const PlateauOptions& options, double lr = 1.0) {
  std::vector<double> out;
  for (const auto& [i, value] :
       kh::ReduceLROnPlateauScheduler::simulate_values(static_cast<int64_t>(metrics.size()), metrics, lr, options)) {
    EXPECT_EQ(i, static_cast<int64_t>(out.size()));
    out.push_back(value);
  }
  return out;
}

// Two parameter groups at lr 1 and 0.1.
struct PlateauRig {
  PlateauRig() : a(2, 1), b(2, 1), opt(std::vector<optim::OptimizerParamGroup>{}, optim::SGDOptions(1.0)) {
    opt.add_param_group(optim::OptimizerParamGroup(a->parameters(), std::make_unique<optim::SGDOptions>(1.0)));
    opt.add_param_group(optim::OptimizerParamGroup(b->parameters(), std::make_unique<optim::SGDOptions>(0.1)));
  }
  double lr(std::size_t g) const { return opt.param_groups()[g].options().get_lr(); }
  torch::nn::Linear a, b;
  optim::SGD opt;
};

TEST(ReduceLROnPlateauTest, PatienceAndRelativeOrAbsoluteThreshold) {
  const std::vector<double> metrics{10, 9.5, 9.2, 9.1, 8.0, 8.0, 8.0, 8.0};
  // rel 0.1: better means < 0.9 * best. 10 is best; 9.5, 9.2, 9.1 are not below 9: bad 1, 2, 3 > patience 2,
  // so the 4th call halves the lr. 8.0 < 9 is the new best; three 8.0 after it reduce again at call 8.
  EXPECT_EQ(plateau_lrs(metrics, PlateauOptions().factor(0.5).patience(2).threshold(0.1)),
            (std::vector<double>{1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25}));
  // abs 0.1: better means < best - 0.1. 9.5 and 9.2 improve, 9.1 is bad (not < 9.1), 8.0 improves; then
  // 8.0 three times: bad 1, 2 and at call 8 bad 3 > 2.
  EXPECT_EQ(plateau_lrs(metrics, PlateauOptions().factor(0.5).patience(2).threshold(0.1).threshold_mode("abs")),
            (std::vector<double>{1, 1, 1, 1, 1, 1, 1, 0.5}));
  // patience 0: every bad call reduces.
  EXPECT_EQ(plateau_lrs({3, 3, 2, 2}, PlateauOptions().factor(0.5).patience(0).threshold(0)),
            (std::vector<double>{1, 0.5, 0.5, 0.25}));
}

TEST(ReduceLROnPlateauTest, CooldownMinLrAndEps) {
  // Constant metric, patience 1, cooldown 2, factor 0.1, min_lr 0.005, abs threshold 0:
  // call 1 sets the best; 2 bad 1; 3 bad 2 > 1: lr 0.1 and a cool-down of 2 calls (4, 5 count
  // nothing); 6 bad 1; 7 bad 2: lr 0.01; 8, 9 cool down; 10 bad 1; 11: max(0.001, 0.005) =
  // 0.005; 12, 13 cool down; 14 bad 1; 15 would reduce but max(0.0005, 0.005) changes nothing.
  const PlateauOptions o =
      PlateauOptions().factor(0.1).patience(1).cooldown(2).min_lr(0.005).threshold(0).threshold_mode("abs");
  const std::vector<double> lrs = plateau_lrs(std::vector<double>(15, 5.0), o);
  const std::vector<double> want{1, 1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 0.005, 0.005, 0.005, 0.005, 0.005};
  ASSERT_EQ(lrs.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(lrs[i], want[i], 1e-15) << "call " << i + 1;

  // eps: halving 1e-7 changes it by 5e-8, skipped when eps is 1e-7, applied with the default 1e-8.
  EXPECT_EQ(plateau_lrs({1, 1}, PlateauOptions().factor(0.5).patience(0).eps(1e-7), 1e-7).back(), 1e-7);
  EXPECT_EQ(plateau_lrs({1, 1}, PlateauOptions().factor(0.5).patience(0), 1e-7).back(), 5e-8);
}

TEST(ReduceLROnPlateauTest, ModeMaxAndNaN) {
  // max, rel 0.01: better means > 1.01 * best. 0.6 > 0.505 improves, 0.605 < 0.606 is bad, 0.61 and
  // 0.62 improve; then 0.7 improves and stays: bad 1, then bad 2 > patience 1 at call 8.
  EXPECT_EQ(plateau_lrs({0.5, 0.6, 0.605, 0.61, 0.62, 0.7, 0.7, 0.7},
                        PlateauOptions().mode("max").threshold(0.01).patience(1).factor(0.5)),
            (std::vector<double>{1, 1, 1, 1, 1, 1, 1, 0.5}));
  // A NaN is never better: it counts as a bad call.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(plateau_lrs({1, nan}, PlateauOptions().patience(0).factor(0.5)), (std::vector<double>{1, 0.5}));
}

TEST(ReduceLROnPlateauTest, MinLrPerGroupAndParamGroupIndex) {
  {
    PlateauRig rig;  // both groups, min_lr 0.5 for group 0: 1 -> max(0.1, 0.5); 0.1 -> 0.01
    kh::ReduceLROnPlateauScheduler s(rig.opt, "loss", PlateauOptions().patience(0).min_lr({0.5, 0.0}));
    s.step(1);
    s.step(1);
    EXPECT_DOUBLE_EQ(rig.lr(0), 0.5);
    EXPECT_DOUBLE_EQ(rig.lr(1), 0.01);
  }
  {
    PlateauRig rig;  // only group 1, with its own bound (ignite would bound it by min_lrs[0])
    kh::ReduceLROnPlateauScheduler s(rig.opt, "loss", PlateauOptions().patience(0).param_group_index(1).min_lr(0.05));
    s.step(1);
    s.step(1);
    EXPECT_DOUBLE_EQ(rig.lr(0), 1.0);
    EXPECT_DOUBLE_EQ(rig.lr(1), 0.05);
    EXPECT_EQ(s.min_lrs(), (std::vector<double>{0.05, 0.05}));
  }
}

// ignite's docstring: metric "loss" of an evaluator run after each of 8 trainer iterations.
TEST(ReduceLROnPlateauTest, IgnitesDocumentedSequenceThroughEngines) {
  auto model = torch::nn::Linear(2, 1);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  const std::vector<double> losses{10, 5, 3, 4, 4, 4, 5, 1};
  Engine trainer([](Engine&, const int&) -> Value { return 0.0; });
  Engine evaluator([](Engine&, const int&) -> Value { return 0.0; });
  evaluator.on(Events::EPOCH_COMPLETED,
               [&](Engine& e) { e.state().metrics["loss"] = losses[trainer.state().iteration - 1]; });
  std::make_shared<kh::ReduceLROnPlateauScheduler>(
      opt, "loss", PlateauOptions().save_history(true).factor(0.5).patience(3).threshold(0.1))
      ->attach(evaluator);  // the engine keeps it alive
  std::vector<double> seen;
  trainer.on(Events::ITERATION_COMPLETED, [&] {
    evaluator.run(std::vector<int>{0}, 1);
    seen.push_back(opt.param_groups()[0].options().get_lr());
  });
  trainer.run(std::vector<int>(8, 0), 1);
  EXPECT_EQ(seen, (std::vector<double>{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05}));
  EXPECT_EQ(plateau_lrs(losses, PlateauOptions().factor(0.5).patience(3).threshold(0.1), 0.1), seen);
}

// Python's torch.optim.lr_scheduler.ReduceLROnPlateau on the same values and options.
TEST(ReduceLROnPlateauTest, MatchesTorchOnALongSequence) {
  std::vector<double> metrics;
  uint64_t x = 12345;
  for (int i = 0; i < 120; ++i) {  // a falling noisy curve with plateaus and exact ties
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    metrics.push_back(std::floor(8.0 * std::exp(-i / 40.0) * 4) / 4 + static_cast<double>((x >> 33) % 3) * 0.25);
  }
  struct Case {
    PlateauOptions options;
    const char* args;  // the same options for Python
  };
  const std::vector<Case> cases{
      {PlateauOptions().patience(3), "min 0.1 3 0.0001 rel 0 0 1e-08"},
      {PlateauOptions().patience(2).cooldown(3).factor(0.5).threshold(0.05), "min 0.5 2 0.05 rel 3 0 1e-08"},
      {PlateauOptions().patience(1).threshold(0.25).threshold_mode("abs").min_lr(0.02),
       "min 0.1 1 0.25 abs 0 0.02 1e-08"},
      {PlateauOptions().mode("max").patience(2).factor(0.7).cooldown(1), "max 0.7 2 0.0001 rel 1 0 1e-08"},
      {PlateauOptions().patience(0).factor(0.9).eps(0.05), "min 0.9 0 0.0001 rel 0 0 0.05"},
  };
  std::ostringstream values;
  for (double v : metrics) values << (values.tellp() > 0 ? " " : "") << std::to_string(v);
  const char* script = R"(
import sys, torch
for case in sys.argv[2:]:
    mode, factor, patience, threshold, tmode, cooldown, min_lr, eps = case.split()
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=1.0)
    s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, factor=float(factor), patience=int(patience),
        threshold=float(threshold), threshold_mode=tmode, cooldown=int(cooldown), min_lr=float(min_lr), eps=float(eps))
    lrs = []
    for v in sys.argv[1].split():
        s.step(float(v))
        lrs.append(repr(opt.param_groups[0]["lr"]))
    print(" ".join(lrs))
)";
  std::vector<std::string> argv{KINDLING_PYTHON, "-c", script, values.str()};
  for (const Case& c : cases) argv.push_back(c.args);
  const auto python = kindling::testing::run_command(argv);
  ASSERT_TRUE(python.ok()) << kindling::testing::describe({python});
  std::istringstream lines(python.out);
  std::vector<double> parsed;
  for (std::istringstream in(values.str()); in;) {
    double v;
    if (in >> v) parsed.push_back(v);
  }
  int reductions = 0;
  for (const Case& c : cases) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << python.out;
    std::istringstream torch_lrs(line);
    const std::vector<double> ours = plateau_lrs(parsed, c.options);
    for (std::size_t i = 0; i < ours.size(); ++i) {
      double want = 0;
      ASSERT_TRUE(torch_lrs >> want) << c.args;
      EXPECT_EQ(ours[i], want) << c.args << ", call " << i + 1;
      reductions += i > 0 && ours[i] != ours[i - 1];
    }
  }
  EXPECT_GE(reductions, 10);  // the sequence exercises the rule
}

TEST(ReduceLROnPlateauTest, StateThroughACheckpointResumesTheSameDecisions) {
  kindling::testing::TempDir dir("plateau");
  const std::vector<double> metrics{5, 4, 4, 4, 3.9, 3.9, 3.9, 3.9, 3.9, 2, 2, 2, 2};
  const PlateauOptions o = PlateauOptions().patience(1).cooldown(1).factor(0.5).save_history(true);
  auto model = torch::nn::Linear(2, 1);
  optim::SGD opt(model->parameters(), optim::SGDOptions(1.0));
  auto plateau = std::make_shared<kh::ReduceLROnPlateauScheduler>(opt, "loss", o);
  Engine trainer([&](Engine& e, const int&) -> Value {
    plateau->step(metrics[e.state().iteration - 1]);
    return 0.0;
  });
  auto checkpoint = std::make_shared<kh::Checkpoint>(
      kh::Objects{{"optimizer", kh::stateful(opt)}, {"lr_plateau", kh::stateful(*plateau)}}, dir.path(),
      kh::CheckpointOptions().filename_prefix("plateau"));
  checkpoint->attach(trainer, Events::COMPLETED);
  trainer.run(std::vector<int>(6, 0), 1);
  ASSERT_TRUE(checkpoint->last_checkpoint());
  const std::string file = *checkpoint->last_checkpoint();
  auto model2 = torch::nn::Linear(2, 1);
  optim::SGD opt2(model2->parameters(), optim::SGDOptions(1.0));
  kh::ReduceLROnPlateauScheduler resumed(opt2, "loss", o);
  kh::Checkpoint::load_objects({{"optimizer", kh::stateful(opt2)}, {"lr_plateau", kh::stateful(resumed)}}, file);
  EXPECT_EQ(resumed.event_index(), 6);
  EXPECT_EQ(resumed.best(), plateau->best());
  EXPECT_EQ(resumed.num_bad_epochs(), plateau->num_bad_epochs());
  EXPECT_EQ(resumed.cooldown_counter(), plateau->cooldown_counter());
  for (std::size_t i = 6; i < metrics.size(); ++i) {
    plateau->step(metrics[i]);
    resumed.step(metrics[i]);
    EXPECT_EQ(opt2.param_groups()[0].options().get_lr(), opt.param_groups()[0].options().get_lr()) << i;
  }
  EXPECT_LT(opt.param_groups()[0].options().get_lr(), 0.2);  // it did reduce after the resume point

  // A fresh state (best = +inf) round-trips through torch's pickle too; torch's keys are there.
  kh::ReduceLROnPlateauScheduler fresh(opt2, "loss");
  const kindling::StateDict sd = fresh.state_dict();
  const auto inner = sd.at("scheduler").toGenericDict();
  for (const char* key : {"factor", "min_lrs", "patience", "cooldown", "cooldown_counter", "mode", "threshold",
                          "threshold_mode", "best", "num_bad_epochs", "mode_worse", "eps", "last_epoch"}) {
    EXPECT_TRUE(inner.contains(key)) << key;
  }
  EXPECT_TRUE(std::isinf(inner.at("best").toDouble()));
  EXPECT_EQ(sd.at("metric_name").toStringRef(), "loss");
}

TEST(ReduceLROnPlateauTest, LoadErrorsChangeNothing) {
  auto model = torch::nn::Linear(2, 1);
  optim::SGD opt(model->parameters(), optim::SGDOptions(1.0));
  kh::ReduceLROnPlateauScheduler s(opt, "loss", PlateauOptions().patience(1));
  s.step(3);
  s.step(4);
  const kindling::StateDict good = s.state_dict();
  auto with = [&](const char* key, c10::IValue value) {
    kindling::StateDict copy = good.copy();
    auto inner = copy.at("scheduler").toGenericDict().copy();
    inner.insert_or_assign(key, std::move(value));
    copy.insert_or_assign("scheduler", inner);
    return copy;
  };
  EXPECT_NE(error_of<UsageError>([&] { s.load_state_dict(with("mode", std::string("minimum"))); }).find("'minimum'"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] { s.load_state_dict(with("factor", 2.0)); }).find("factor should be < 1.0"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] {
              s.load_state_dict(with("min_lrs", std::vector<double>{0, 0}));
            }).find("2 min_lrs but the optimizer has 1"),
            std::string::npos);
  kindling::StateDict no_inner = good.copy();
  ASSERT_EQ(no_inner.erase("scheduler"), 1u);
  EXPECT_NE(error_of<UsageError>([&] { s.load_state_dict(no_inner); }).find("'scheduler' is absent"),
            std::string::npos);
  EXPECT_EQ(s.best(), 3);
  EXPECT_EQ(s.num_bad_epochs(), 1);
  EXPECT_EQ(s.event_index(), 2);
}

TEST(ReduceLROnPlateauTest, ArgumentAndUsageErrors) {
  auto model = torch::nn::Linear(2, 1);
  optim::SGD opt(model->parameters(), optim::SGDOptions(1.0));
  auto make = [&](const PlateauOptions& o) { kh::ReduceLROnPlateauScheduler s(opt, "loss", o); };
  EXPECT_NE(error_of<UsageError>([&] { make(PlateauOptions().factor(1.0)); }).find("factor should be < 1.0"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] { make(PlateauOptions().mode("minimum")); }).find("mode 'minimum' is unknown"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] { make(PlateauOptions().threshold_mode("relative")); }).find("\"rel\""),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] {
              make(PlateauOptions().min_lr({0.1, 0.2}));
            }).find("expected 1 min_lrs"),
            std::string::npos);
  EXPECT_THROW(make(PlateauOptions().patience(-1)), UsageError);
  EXPECT_THROW(make(PlateauOptions().min_lr(-0.1)), UsageError);
  EXPECT_THROW(make(PlateauOptions().param_group_index(1)), UsageError);
  EXPECT_THROW(kh::ReduceLROnPlateauScheduler(opt, ""), UsageError);
  EXPECT_THROW(kh::ReduceLROnPlateauScheduler::simulate_values(3, {1, 2}, 0.1), UsageError);

  // A missing metric names it and the metrics present; the run rethrows it.
  auto plateau = std::make_shared<kh::ReduceLROnPlateauScheduler>(opt, "loss");
  Engine evaluator([](Engine&, const int&) -> Value { return 0.0; });
  evaluator.on(Events::EPOCH_COMPLETED, [](Engine& e) { e.state().metrics["accuracy"] = 0.5; });
  plateau->attach(evaluator);
  const std::string missing = error_of<UsageError>([&] { evaluator.run(std::vector<int>{0}, 1); });
  EXPECT_NE(missing.find("'loss' is not in Engine.state().metrics, which holds 'accuracy'"), std::string::npos)
      << missing;
  Engine tensors([](Engine&, const int&) -> Value { return 0.0; });
  tensors.state().metrics["loss"] = at::ones({3});
  EXPECT_NE(error_of<UsageError>([&] { (*plateau)(tensors); }).find("expected a number"), std::string::npos);

  // Stepping through the base class has no metric: refused, with what to call instead.
  std::shared_ptr<kh::ParamScheduler> base = plateau;
  EXPECT_NE(error_of<UsageError>([&] { base->step(); }).find("call step(value)"), std::string::npos);
  EXPECT_EQ(plateau->event_index(), 0);
  // Patience, cooldown, threshold and eps checks say what to pass.
  EXPECT_NE(error_of<UsageError>([&] {
              make(PlateauOptions().patience(-1));
            }).find("patience should be >= 0, got -1; pass the number of calls without improvement"),
            std::string::npos);
  EXPECT_NE(
      error_of<UsageError>([&] { make(PlateauOptions().cooldown(-2)); }).find("cooldown should be >= 0, got -2; pass"),
      std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] {
              make(PlateauOptions().threshold(-0.1));
            }).find("threshold should be >= 0, got -0.1; pass"),
            std::string::npos);
  EXPECT_NE(
      error_of<UsageError>([&] { make(PlateauOptions().eps(-1e-8)); }).find("eps should be >= 0, got -1e-08; pass"),
      std::string::npos);
  // The ownership rule.
  kh::ReduceLROnPlateauScheduler on_stack(opt, "loss");
  EXPECT_NE(error_of<UsageError>([&] { on_stack.attach(evaluator); }).find("std::make_shared"), std::string::npos);
}

// Through a std::shared_ptr<ParamScheduler> (whose attach() is not virtual) the scheduler is
// refused when it is attached, not at the first iteration; operator() reads the metric.
TEST(ReduceLROnPlateauTest, ThroughTheBaseClassAttachIsRefusedAtOnce) {
  auto model = torch::nn::Linear(2, 1);
  optim::SGD opt(model->parameters(), optim::SGDOptions(1.0));
  std::shared_ptr<kh::ParamScheduler> base =
      std::make_shared<kh::ReduceLROnPlateauScheduler>(opt, "loss", PlateauOptions().patience(0).factor(0.5));
  EXPECT_TRUE(base->needs_metric());
  Engine trainer([](Engine&, const int&) -> Value { return 0.0; });
  const std::string message = error_of<UsageError>([&] { base->attach(trainer); });
  EXPECT_NE(message.find("kindling::handlers::ReduceLROnPlateauScheduler: attached through ParamScheduler::attach"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("std::static_pointer_cast<ReduceLROnPlateauScheduler>(scheduler)->attach(evaluator)"),
            std::string::npos)
      << message;
  trainer.run(std::vector<int>{0, 0}, 1);  // nothing was attached: the run is not broken
  EXPECT_EQ(base->event_index(), 0);
  // A ConcatScheduler has no metric either: refused when it is built.
  auto cosine = std::make_shared<kh::CosineAnnealingScheduler>(opt, "lr", 1.0, 0.1, 4);
  EXPECT_NE(error_of<UsageError>([&] {
              kh::ConcatScheduler concat({cosine, base}, {2});
            }).find("ReduceLROnPlateauScheduler steps from a metric value, which a ConcatScheduler does not have"),
            std::string::npos);
  // operator() is virtual: through the base class it reads the metric.
  Engine evaluator([](Engine&, const int&) -> Value { return 0.0; });
  evaluator.state().metrics["loss"] = 1.0;
  (*base)(evaluator);
  (*base)(evaluator);  // not better: patience 0 halves the lr
  EXPECT_EQ(opt.param_groups()[0].options().get_lr(), 0.5);
  EXPECT_EQ(base->event_index(), 2);
}

}  // namespace
