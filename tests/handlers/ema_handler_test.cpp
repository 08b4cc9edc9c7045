// EMAHandler: the EMA after N iterations against the closed form (with and without warm-up,
// every iteration and every other one), buffers copied, the copy (clone, factory, DDP's
// module), the EMA model through a Checkpoint and an evaluator, and the misuse errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <vector>

#include "kindling/dist/auto.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/handlers/ema_handler.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "support/errors.h"
#include "support/files.h"

namespace {

namespace kh = kindling::handlers;
using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;
using EmaOptions = kh::EMAHandlerOptions;

// w (3 values) at the top, v (2) in a submodule, and a buffer; float64 so that the closed form
// compares to 1e-12.
struct EmaInnerImpl : torch::nn::Cloneable<EmaInnerImpl> {
  EmaInnerImpl() { reset(); }
  void reset() override { v = register_parameter("v", at::tensor({1.0, -2.0}, at::kDouble)); }
  at::Tensor v;
};
TORCH_MODULE(EmaInner);

struct EmaNetImpl : torch::nn::Cloneable<EmaNetImpl> {
  EmaNetImpl() { reset(); }
  void reset() override {
    w = register_parameter("w", at::tensor({0.5, -1.0, 2.0}, at::kDouble));
    inner = register_module("inner", EmaInner());
    seen = register_buffer("seen", at::zeros({2}, at::kDouble));
  }
  at::Tensor forward(const at::Tensor& x) { return x * w; }
  at::Tensor w, seen;
  EmaInner inner{nullptr};
};
TORCH_MODULE(EmaNet);

// Not Cloneable.
struct PlainEmaNet : torch::nn::Module {
  explicit PlainEmaNet(int64_t n = 2) { w = register_parameter("w", at::ones({n})); }
  at::Tensor w;
};

// At iteration t the "training" sets w = t * (1, 2, 3), v = -t * (1, 1), seen = (t, 2t).
Engine ema_trainer(const EmaNet& net) {
  return Engine([net](Engine& e, const int&) -> Value {
    const double t = static_cast<double>(e.state().iteration);
    at::NoGradGuard no_grad;
    net->w.copy_(at::tensor({1.0, 2.0, 3.0}, at::kDouble) * t);
    net->inner->v.fill_(-t);
    net->seen.copy_(at::tensor({t, 2 * t}, at::kDouble));
    return 0.0;
  });
}

// The closed form of the recurrence e_t = (1 - m_t) e_{t-1} + m_t p_t over the updates (t, m_t):
// e_N = prod_t (1 - m_t) * e_0 + sum_t m_t * p_t * prod_{s after t} (1 - m_s).
at::Tensor ema_closed_form(const at::Tensor& e0, const std::vector<std::pair<double, double>>& updates,
                           const at::Tensor& direction) {
  double keep_all = 1;
  for (const auto& u : updates) keep_all *= 1 - u.second;
  at::Tensor out = e0 * keep_all;
  for (std::size_t k = 0; k < updates.size(); ++k) {
    double keep_after = 1;
    for (std::size_t s = k + 1; s < updates.size(); ++s) keep_after *= 1 - updates[s].second;
    out = out + direction * (updates[k].first * updates[k].second * keep_after);
  }
  return out;
}

TEST(EMAHandlerTest, MomentumWarmupAsIgnite) {
  EmaNet net;
  auto ema = std::make_shared<kh::EMAHandler>(net, EmaOptions().momentum(0.3).momentum_warmup(0.1).warmup_iters(4));
  // From 0.1 at iteration 1 to 0.3 at iteration 4 in 3 equal steps, then 0.3.
  const std::vector<double> want{0.1, 0.1 + 0.2 / 3, 0.1 + 0.4 / 3, 0.3, 0.3, 0.3};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(ema->momentum_at(i + 1), want[i], 1e-15) << i;
  EXPECT_EQ(kh::EMAHandler(net).momentum_at(1), 0.0002);  // ignite's default, no warm-up
  // warmup_iters 1: ignite's denominator max(1, warmup_iters - 1) gives momentum from iteration 2.
  kh::EMAHandler one(net, EmaOptions().momentum(0.5).momentum_warmup(0.2).warmup_iters(1));
  EXPECT_EQ(one.momentum_at(1), 0.2);
  EXPECT_EQ(one.momentum_at(2), 0.5);
  EXPECT_NE(error_of<UsageError>([&] { ema->momentum_at(0); }).find("at least 1"), std::string::npos);
}

TEST(EMAHandlerTest, EmaAfterNIterationsEqualsTheClosedForm) {
  for (const bool every_other : {false, true}) {
    EmaNet net;
    const at::Tensor w0 = net->w.detach().clone(), v0 = net->inner->v.detach().clone();
    auto ema = std::make_shared<kh::EMAHandler>(net, EmaOptions().momentum(0.3).momentum_warmup(0.1).warmup_iters(4));
    Engine trainer = ema_trainer(net);
    ema->attach(trainer, "ema_momentum",
                every_other ? Events::ITERATION_COMPLETED.every(2) : Events::ITERATION_COMPLETED);
    std::vector<double> momenta;
    trainer.on(Events::ITERATION_COMPLETED,
               [&](Engine& e) { momenta.push_back(e.state().attributes.at("ema_momentum").number()); });
    trainer.run(std::vector<int>(7, 0), 1);
    // The updates: (t, m_t) for each iteration t that ran the handler; the momentum is the iteration's.
    std::vector<std::pair<double, double>> updates;
    for (int t = every_other ? 2 : 1; t <= 7; t += every_other ? 2 : 1) updates.emplace_back(t, ema->momentum_at(t));
    auto ema_net = ema->ema_model_as<EmaNetImpl>();
    EXPECT_TRUE(
        at::allclose(ema_net->w, ema_closed_form(w0, updates, at::tensor({1.0, 2.0, 3.0}, at::kDouble)), 1e-12, 1e-12))
        << ema_net->w;
    EXPECT_TRUE(
        at::allclose(ema_net->inner->v, ema_closed_form(v0, updates, at::full({2}, -1.0, at::kDouble)), 1e-12, 1e-12));
    // The attribute holds the last momentum set (0 until the first update, as ignite's attach sets it).
    EXPECT_EQ(momenta.front(), every_other ? 0.0 : 0.1);
    EXPECT_EQ(momenta.back(), every_other ? ema->momentum_at(6) : 0.3);
    // Buffers are copied from the model, not averaged, and not shared with it.
    EXPECT_TRUE(
        at::equal(ema_net->seen, at::tensor({every_other ? 6.0 : 7.0, every_other ? 12.0 : 14.0}, at::kDouble)));
    net->seen.fill_(-1);
    EXPECT_FALSE(at::equal(ema_net->seen, net->seen));
  }
}

TEST(EMAHandlerTest, TheCopyIsDetachedInEvalModeAndFollowsDdpsModule) {
  EmaNet net;
  kh::EMAHandler ema(net);
  auto copy = ema.ema_model_as<EmaNetImpl>();
  EXPECT_NE(copy.get(), net.get());
  EXPECT_FALSE(copy->is_training());
  EXPECT_FALSE(copy->w.requires_grad());
  EXPECT_TRUE(net->w.requires_grad());
  EXPECT_NE(copy->w.data_ptr(), net->w.data_ptr());
  EXPECT_TRUE(at::equal(copy->w, net->w));
  EXPECT_NE(error_of<UsageError>([&] { ema.ema_model_as<PlainEmaNet>(); }).find("not the class asked for"),
            std::string::npos);

  // A DDP model (the serial model's pass-through here): the EMA tracks its module.
  auto ddp = kindling::dist::auto_model(net);
  kh::EMAHandler of_ddp(ddp);
  EXPECT_EQ(of_ddp.model().get(), static_cast<torch::nn::Module*>(net.get()));
  {
    at::NoGradGuard no_grad;
    net->w.fill_(4);
  }
  of_ddp.update(0.5);
  EXPECT_TRUE(at::allclose(of_ddp.ema_model_as<EmaNetImpl>()->w, (at::tensor({0.5, -1.0, 2.0}, at::kDouble) + 4) / 2));
}

TEST(EMAHandlerTest, ModulesThatAreNotCloneableNeedAFactory) {
  auto plain = std::make_shared<PlainEmaNet>();
  const std::string msg = error_of<UsageError>([&] { kh::EMAHandler ema(plain); });
  EXPECT_NE(msg.find("not Cloneable"), std::string::npos) << msg;
  EXPECT_NE(msg.find("torch::nn::Cloneable<"), std::string::npos) << msg;
  EXPECT_NE(msg.find("factory"), std::string::npos) << msg;

  {
    at::NoGradGuard no_grad;
    plain->w.copy_(at::tensor({3.0f, 4.0f}));
  }
  kh::EMAHandler ema(plain, EmaOptions(), [] { return std::make_shared<PlainEmaNet>(); });
  EXPECT_TRUE(at::equal(ema.ema_model_as<PlainEmaNet>()->w, at::tensor({3.0f, 4.0f})));
  EXPECT_FALSE(ema.ema_model_as<PlainEmaNet>()->w.requires_grad());

  const std::string shape = error_of<UsageError>(
      [&] { kh::EMAHandler(plain, EmaOptions(), [] { return std::make_shared<PlainEmaNet>(3); }); });
  EXPECT_NE(shape.find("'w' ([3] Float on cpu)"), std::string::npos) << shape;
  EXPECT_THROW(kh::EMAHandler(plain, EmaOptions(), [plain] { return plain; }), UsageError);
  EXPECT_THROW(kh::EMAHandler(plain, EmaOptions(), [] { return std::shared_ptr<torch::nn::Module>(); }), UsageError);
}

TEST(EMAHandlerTest, EmaModelThroughACheckpointAndAnEvaluator) {
  kindling::testing::TempDir dir("ema");
  EmaNet net;
  auto ema = std::make_shared<kh::EMAHandler>(net, EmaOptions().momentum(0.25));
  Engine trainer = ema_trainer(net);
  ema->attach(trainer);
  auto checkpoint = std::make_shared<kh::Checkpoint>(
      kh::Objects{{"model", kh::stateful(net)}, {"ema_model", kh::stateful(ema->ema_model())}}, dir.path());
  checkpoint->attach(trainer, Events::COMPLETED);
  trainer.run(std::vector<int>(5, 0), 1);
  ASSERT_TRUE(checkpoint->last_checkpoint());

  // A fresh model and handler (its EMA starts as the fresh model) take the saved EMA back.
  EmaNet net2;
  kh::EMAHandler ema2(net2, EmaOptions().momentum(0.25));
  ASSERT_FALSE(at::equal(ema2.ema_model_as<EmaNetImpl>()->w, ema->ema_model_as<EmaNetImpl>()->w));
  kh::Checkpoint::load_objects({{"model", kh::stateful(net2)}, {"ema_model", kh::stateful(ema2.ema_model())}},
                               *checkpoint->last_checkpoint());
  for (const auto& p : ema->ema_model()->named_parameters()) {
    EXPECT_TRUE(at::equal(p.value(), ema2.ema_model()->named_parameters()[p.key()])) << p.key();
  }
  EXPECT_TRUE(at::equal(ema2.ema_model_as<EmaNetImpl>()->seen, at::tensor({5.0, 10.0}, at::kDouble)));

  // Evaluate the EMA model: the evaluator's outputs are x * ema_w.
  auto ema_net = ema2.ema_model_as<EmaNetImpl>();
  Engine evaluator([ema_net](Engine&, const at::Tensor& x) -> Value { return ema_net->forward(x); });
  std::vector<at::Tensor> outputs;
  evaluator.on(Events::ITERATION_COMPLETED, [&](Engine& e) { outputs.push_back(e.state().output.tensor()); });
  const std::vector<at::Tensor> inputs{at::ones({3}, at::kDouble), at::arange(3, at::kDouble)};
  evaluator.run(inputs, 1);
  ASSERT_EQ(outputs.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(at::allclose(outputs[i], inputs[i] * ema->ema_model_as<EmaNetImpl>()->w));
}

// A trainer resumed from a state that holds the attribute (state_dict_user_keys): attach
// keeps the restored momentum with one warning instead of failing, and the warm-up goes on
// from the restored iteration (engine iterations, ignite 0.4.6's rule).
TEST(EMAHandlerTest, AttachAfterAResumeKeepsTheRestoredMomentumAndWarnsOnce) {
  const EmaOptions options = EmaOptions().momentum(0.3).momentum_warmup(0.1).warmup_iters(4);
  const std::vector<int> data(2, 0);
  EmaNet net;
  Engine first = ema_trainer(net);
  first.state_dict_user_keys().push_back("ema_momentum");
  std::make_shared<kh::EMAHandler>(net, options)->attach(first);
  first.on(Events::EPOCH_COMPLETED, [](Engine& e) { e.interrupt(); });  // the "job" ends after epoch 1
  first.run(data, 3);
  ASSERT_EQ(first.state().iteration, 2);
  const kindling::StateDict saved = first.state_dict();

  EmaNet net2;
  Engine resumed = ema_trainer(net2);
  resumed.name = "trainer";
  resumed.state_dict_user_keys().push_back("ema_momentum");
  resumed.load_state_dict(saved);
  auto ema = std::make_shared<kh::EMAHandler>(net2, options);
  ::testing::internal::CaptureStderr();
  ema->attach(resumed);  // no throw
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(kindling::testing::occurrences(err, "already in trainer.state().attributes"), 1) << err;
  EXPECT_NE(err.find("Expected when the trainer's state was restored with it"), std::string::npos) << err;
  EXPECT_EQ(resumed.state().attributes.at("ema_momentum").number(), ema->momentum_at(2));  // kept
  std::vector<double> momenta;
  resumed.on(Events::ITERATION_COMPLETED,
             [&](Engine& e) { momenta.push_back(e.state().attributes.at("ema_momentum").number()); });
  resumed.run(data, 3);
  EXPECT_EQ(resumed.state().iteration, 6);
  EXPECT_EQ(momenta, (std::vector<double>{ema->momentum_at(3), 0.3, 0.3, 0.3}));
  EXPECT_NEAR(momenta.front(), 0.1 + 0.4 / 3, 1e-15);  // the warm-up went on at iteration 3
}

TEST(EMAHandlerTest, MisuseErrors) {
  EmaNet net;
  auto expect_error = [&](const EmaOptions& o, const char* text) {
    const std::string msg = error_of<UsageError>([&] { kh::EMAHandler ema(net, o); });
    EXPECT_NE(msg.find(text), std::string::npos) << msg;
    EXPECT_NE(msg.find("kindling::handlers::EMAHandler"), std::string::npos) << msg;
  };
  expect_error(EmaOptions().momentum(0), "invalid momentum 0");
  expect_error(EmaOptions().momentum(1), "invalid momentum 1");
  expect_error(EmaOptions().momentum(0.1).momentum_warmup(0.2).warmup_iters(3), "less than or equal to momentum");
  expect_error(EmaOptions().momentum_warmup(0.0001).warmup_iters(0), "invalid warmup_iters 0");
  expect_error(EmaOptions().momentum_warmup(0.0001), "set both or neither");
  expect_error(EmaOptions().warmup_iters(10), "set both or neither");
  EXPECT_THROW(kh::EMAHandler(std::shared_ptr<torch::nn::Module>()), UsageError);

  Engine trainer = ema_trainer(net);
  auto first = std::make_shared<kh::EMAHandler>(net);
  first->attach(trainer);
  // A second handler on the same name is not refused (current ignite warns): the warning says
  // to give it another name.
  ::testing::internal::CaptureStderr();
  std::make_shared<kh::EMAHandler>(net)->attach(trainer);
  const std::string twice = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(twice.find("'ema_momentum' is already in Engine.state().attributes (holding 0)"), std::string::npos)
      << twice;
  EXPECT_NE(twice.find("attach this one under another name, e.g. \"ema_momentum_2\""), std::string::npos) << twice;
  ::testing::internal::CaptureStderr();
  std::make_shared<kh::EMAHandler>(net)->attach(trainer, "ema_momentum_2");  // another name: no warning
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  kh::EMAHandler on_stack(net);
  EXPECT_NE(error_of<UsageError>([&] { on_stack.attach(trainer, "third"); }).find("std::make_shared"),
            std::string::npos);

  // The model changed dtype after the copy: the update says what happened instead of mixing them.
  net->to(at::kFloat);
  const std::string moved = error_of<UsageError>([&] { first->update(0.1); });
  EXPECT_NE(moved.find("Build the handler after moving the model"), std::string::npos) << moved;
}

}  // namespace
