// ZeroRedundancyOptimizer (kindling/nn/zero.h): the training equals plain DDP's with the
// ordinary optimizer (bit for bit on 2 ranks), each rank holds its share of the state, the
// consolidated state is the ordinary optimizer's and resumes at another world size, GradScaler's
// skip is the group's decision, and misuse is refused. Real processes on every CPU backend.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/engine/amp.h>
#include <kindling/engine/supervised.h>
#include <kindling/error.h>
#include <kindling/handlers/checkpointing/stateful.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/join.h>
#include <kindling/nn/optimizer_state.h>
#include <kindling/nn/zero.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <fstream>
#include <functional>
#include <memory>
#include <iterator>
#include <string>

#include "support/backend_world_test.h"
#include "support/files.h"
#include "support/multiprocess.h"
#include "support/optimizers.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace zero_test {

using Net = kindling::testing::Mlp3;

// Two groups (layer a at half the rate), so that a bucket's chunk may span both.
std::vector<torch::optim::OptimizerParamGroup> groups_of(const Net& net, const torch::optim::OptimizerOptions& o) {
  return kindling::testing::two_groups(net, o, 2);
}

// One step's data on this rank.
std::pair<torch::Tensor, torch::Tensor> batch(int step) {
  torch::manual_seed(1000 + 10 * step + kd::get_rank());
  auto x = torch::randn({6, 12});
  return {x, torch::randn({6, 4})};
}

torch::Tensor flat_parameters(const Net& net) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : net->parameters()) flat.push_back(p.detach().reshape({-1}).clone());
  return torch::cat(flat);
}

// A scheduler's change at the third step: the optimizer inside backward must read the options
// of the moment, as the ordinary step does.
void train(Net& net, torch::optim::Optimizer& optimizer, kn::DdpOptions options, int from, int steps) {
  auto model = kd::auto_model(net, options.bucket_cap_mb(0.002));
  for (int step = from; step < from + steps; ++step) {
    if (step == 2)
      for (auto& g : optimizer.param_groups()) g.options().set_lr(g.options().get_lr() / 2);
    optimizer.zero_grad();
    auto [x, y] = batch(step);
    torch::mse_loss(model(x), y).backward();
    optimizer.step();
  }
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  if (kd::get_world_size() == 2) {
    WCHECK(torch::equal(a, b), << what << ": not bit for bit, max difference " << (a - b).abs().max().item<double>());
  } else {
    WCHECK(torch::allclose(a, b, 0, 1e-6), << what << ": max difference " << (a - b).abs().max().item<double>());
  }
}

int64_t state_numel(const kindling::StateDict& sd) {
  int64_t n = 0;
  for (const auto& kv : sd.at("state").toGenericDict())
    for (const auto& e : kv.value().toGenericDict())
      if (e.value().isTensor()) n += e.value().toTensor().numel();
  return n;
}

void expect_same_state(const kindling::StateDict& zero, const kindling::StateDict& plain, const std::string& what) {
  const auto zs = zero.at("state").toGenericDict();
  const auto ps = plain.at("state").toGenericDict();
  WCHECK(zs.size() == ps.size(), << what << ": " << zs.size() << " parameter states, plain " << ps.size());
  for (const auto& kv : ps) {
    const auto mine = zs.at(kv.key()).toGenericDict();
    for (const auto& e : kv.value().toGenericDict()) {
      const std::string key = what + " state " + std::to_string(kv.key().toInt()) + "." + e.key().toStringRef();
      const c10::IValue v = mine.at(e.key());
      if (e.value().isTensor()) {
        expect_close(v.toTensor(), e.value().toTensor(), key);
      } else {
        const c10::IValue& w = e.value();
        const bool same = v.isNone() ? w.isNone() : v.isInt() ? w.isInt() && v.toInt() == w.toInt() : v.isDouble() && w.isDouble() && v.toDouble() == w.toDouble();
        WCHECK(same, << key << " differs: " << v << " against " << w);
      }
    }
  }
}

void initialize() {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
}

KINDLING_WORKER(zero_trains_as_ddp) {
  initialize();
  const int n = kd::get_world_size();
  const auto kinds = kindling::testing::optimizer_kinds();
  for (const auto& [name, options] : kinds) {
    torch::manual_seed(77);
    Net plain_net;
    auto plain = kindling::testing::ordinary_optimizer(*options, groups_of(plain_net, *options));
    train(plain_net, *plain, kn::DdpOptions(), 0, 5);
    const auto whole = kn::optimizer_state_dict(*plain);
    for (bool overlap : {false, true}) {
      const std::string what = name + (overlap ? " overlapped with DDP" : "");
      torch::manual_seed(77);
      Net zero_net;
      kn::ZeroRedundancyOptimizer zero(groups_of(zero_net, *options), *options,
                                       kn::ZeroOptions().overlap_with_ddp(overlap));
      train(zero_net, zero, kn::DdpOptions().comm_hook(zero.comm_hook()), 0, 5);
      expect_close(flat_parameters(zero_net), flat_parameters(plain_net), what + " weights");
      expect_same_state(zero.state_dict(), whole, what);
      expect_same_state(kindling::handlers::stateful(zero)->state_dict(), whole, what + " through stateful()");
      // Each rank holds its chunk of every bucket: at most a chunk's rounding above 1/n.
      const int64_t total = state_numel(whole);
      const int64_t mine = zero.local_state_numel();
      WCHECK(kd::all_reduce(mine) == total, << what << ": the ranks hold " << kd::all_reduce(mine) << " of " << total);
      WCHECK(std::abs(mine - total / n) <= total / n / 20 + 64,
             << what << ": rank " << kd::get_rank() << " holds " << mine << " of " << total << " state elements");
    }
  }
  kd::finalize();
}

// GradScaler: an overflow in one rank's gradient, in that rank's own chunk only, makes every rank
// skip the step (else the ranks would disagree and the next all_gather would not pair up).
struct VectorImpl : torch::nn::Module {
  VectorImpl() { w = register_parameter("w", torch::ones({8})); }
  torch::Tensor forward(torch::Tensor x) { return (w * x).sum(); }
  torch::Tensor w;
};
TORCH_MODULE(Vector);

KINDLING_WORKER(zero_grad_scaler_agrees) {
  initialize();
  Vector net;
  kn::ZeroRedundancyOptimizer zero(net->parameters(), torch::optim::AdamOptions(0.1));
  auto model = kd::auto_model(net, kn::DdpOptions().comm_hook(zero.comm_hook()));
  kindling::engine::GradScaler scaler;
  for (int step = 0; step < 2; ++step) {
    zero.zero_grad();
    auto x = torch::full({8}, 1.0 + kd::get_rank());
    if (step == 0 && kd::get_rank() == 0) x[1] = std::numeric_limits<float>::infinity();  // rank 0's chunk
    scaler.scale(model(x)).backward();
    const bool stepped = scaler.step(zero);
    scaler.update();
    WCHECK(stepped == (step == 1), << "rank " << kd::get_rank() << " step " << step << ": stepped=" << stepped);
  }
  const auto all = kd::all_gather(net->w.detach().clone());
  WCHECK(torch::equal(all.narrow(0, 0, 8), all.narrow(0, 8, 8)), << "the ranks' weights differ: " << all);
  WCHECK(!torch::equal(net->w.detach(), torch::ones({8})), << "the second step did not change the weights");
  kd::finalize();
}

KINDLING_WORKER(zero_refuses_a_model_without_its_hook) {
  initialize();
  Net net;
  kn::ZeroRedundancyOptimizer zero(net->parameters(), torch::optim::SGDOptions(0.1));
  auto model = kd::auto_model(net);
  auto [x, y] = batch(0);
  torch::mse_loss(model(x), y).backward();
  std::string message;
  try {
    zero.step();
  } catch (const kindling::UsageError& e) {
    message = e.what();
  }
  WCHECK(message.find("DdpOptions().comm_hook(optimizer.comm_hook())") != std::string::npos, << message);
  kd::finalize();
}

// overlap_with_ddp: after the first step the chunks are stepped inside backward (the weights
// move before step()), a second synchronised backward before step() is refused, and so are
// GradScaler, Join and an optimizer destroyed before its model; no_sync accumulation still works.
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kindling::UsageError& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

KINDLING_WORKER(zero_overlap_rules) {
  initialize();
  Net net;
  kn::ZeroRedundancyOptimizer zero(net->parameters(), torch::optim::SGDOptions(0.1),
                                   kn::ZeroOptions().overlap_with_ddp(true));
  auto model = kd::auto_model(net, kn::DdpOptions().comm_hook(zero.comm_hook()).bucket_cap_mb(0.002));
  auto backward = [&](int step) {
    auto [x, y] = batch(step);
    torch::mse_loss(model(x), y).backward();
  };
  zero.zero_grad();
  backward(0);
  zero.step();  // learns the layout
  zero.zero_grad();
  {
    auto no_sync = model.no_sync();
    backward(1);
  }
  const torch::Tensor before = flat_parameters(net);
  backward(2);
  WCHECK(!torch::equal(flat_parameters(net), before), << "backward did not step this rank's chunks");
  const std::string twice = message_of([&] { backward(3); });
  WCHECK(twice.find("call optimizer.step() after every synchronised backward") != std::string::npos, << twice);
  kindling::engine::GradScaler scaler;
  const std::string scaled = message_of([&] { scaler.unscale_(zero); });
  WCHECK(scaled.find("make it without overlap_with_ddp") != std::string::npos, << scaled);
  const std::string joined = message_of([&] { kn::Join join(model); });
  WCHECK(joined.find("make that optimizer without overlap_with_ddp") != std::string::npos, << joined);
  zero.step();  // receives backward(2)'s chunks: every rank ends with the same weights
  const auto all = kd::all_gather(flat_parameters(net).unsqueeze(0));
  WCHECK(torch::equal(all[0], all[1]), << "the ranks' weights differ after step()");
  // An optimizer destroyed while its DDP model still trains: the next backward says so.
  Net other;
  auto gone = std::make_unique<kn::ZeroRedundancyOptimizer>(other->parameters(), torch::optim::SGDOptions(0.1),
                                                            kn::ZeroOptions().overlap_with_ddp(true));
  auto orphan = kd::auto_model(other, kn::DdpOptions().comm_hook(gone->comm_hook()));
  auto orphan_backward = [&] {
    auto [x, y] = batch(4);
    torch::mse_loss(orphan(x), y).backward();
  };
  orphan_backward();
  gone->step();
  gone.reset();
  const std::string destroyed = message_of(orphan_backward);
  WCHECK(destroyed.find("keep the optimizer alive as long as the model") != std::string::npos, << destroyed);
  kd::finalize();
}

// overlap_with_ddp: a second backward through a retained graph is refused with the reason (the
// first one stepped the weights that graph saved), not left to autograd's version check.
KINDLING_WORKER(zero_overlap_refuses_a_retained_graph) {
  initialize();
  Net net;
  kn::ZeroRedundancyOptimizer zero(net->parameters(), torch::optim::AdamOptions(1e-2),
                                   kn::ZeroOptions().overlap_with_ddp(true));
  auto model = kd::auto_model(net, kn::DdpOptions().comm_hook(zero.comm_hook()).bucket_cap_mb(0.002));
  for (int step = 0; step < 2; ++step) {  // the second steps inside backward
    auto [x, y] = batch(step);
    torch::mse_loss(model(x), y).backward();
    zero.step();
  }
  auto [x, y] = batch(2);
  auto loss = torch::mse_loss(model(x), y);
  loss.backward({}, /*retain_graph=*/true);
  const std::string again = message_of([&] { loss.backward(); });
  WCHECK(again.find("second backward through the same graph (retain_graph) is not possible") != std::string::npos &&
             again.find("on rank " + std::to_string(kd::get_rank())) != std::string::npos,
         << again);
  zero.step();
  const auto all = kd::all_gather(flat_parameters(net).unsqueeze(0));
  WCHECK(torch::equal(all[0], all[1]), << "the ranks' weights differ after step()");
  kd::finalize();
}

// In the Engine: create_supervised_trainer steps it as any optimizer, in both modes, and the
// weights equal the same trainer's with plain DDP and LibTorch's Adam.
KINDLING_WORKER(zero_in_the_engine) {
  initialize();
  std::vector<kindling::data::Example> data;
  for (int step = 0; step < 4; ++step) {
    auto [x, y] = batch(step);
    data.push_back({x, y});
  }
  auto mse = [](const at::Tensor& y_pred, const at::Tensor& y) { return torch::mse_loss(y_pred, y); };
  const torch::optim::AdamOptions options(1e-2);
  auto train_with = [&](torch::optim::Optimizer& optimizer, Net& net, kn::DdpOptions ddp) {
    auto model = kd::auto_model(net, ddp.bucket_cap_mb(0.002));
    auto trainer = kindling::engine::create_supervised_trainer(model, optimizer, mse);
    trainer.run(data, 2);
  };
  torch::manual_seed(5);
  Net plain_net;
  torch::optim::Adam plain(plain_net->parameters(), options);
  train_with(plain, plain_net, kn::DdpOptions());
  for (bool overlap : {false, true}) {
    torch::manual_seed(5);
    Net net;
    kn::ZeroRedundancyOptimizer zero(net->parameters(), options, kn::ZeroOptions().overlap_with_ddp(overlap));
    train_with(zero, net, kn::DdpOptions().comm_hook(zero.comm_hook()));
    expect_close(flat_parameters(net), flat_parameters(plain_net), overlap ? "engine, overlapped" : "engine");
  }
  kd::finalize();
}

class ZeroTest : public kindling::testing::BackendWorldTest {};
TEST_P(ZeroTest, TrainsAsDdpWithItsShareOfTheState) { expect_ok("zero_trains_as_ddp"); }
INSTANTIATE_TEST_SUITE_P(Backends, ZeroTest, ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

class ZeroTwoRanksTest : public kindling::testing::BackendWorldTest {};
TEST_P(ZeroTwoRanksTest, GradScalerSkipsOnEveryRank) { expect_ok("zero_grad_scaler_agrees"); }
TEST_P(ZeroTwoRanksTest, RefusesAModelWithoutItsHook) { expect_ok("zero_refuses_a_model_without_its_hook"); }
TEST_P(ZeroTwoRanksTest, OverlapStepsInsideBackwardAndRefusesMisuse) { expect_ok("zero_overlap_rules"); }
TEST_P(ZeroTwoRanksTest, OverlapRefusesASecondBackwardThroughARetainedGraph) {
  expect_ok("zero_overlap_refuses_a_retained_graph");
}
TEST_P(ZeroTwoRanksTest, TrainsInTheEngineAsDdp) { expect_ok("zero_in_the_engine"); }
INSTANTIATE_TEST_SUITE_P(Backends, ZeroTwoRanksTest, ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

// Saved at 2 ranks, resumed at 3: ZeRO loaded before its first step (the layout not yet known)
// trains as plain DDP with the ordinary optimizer loaded from the same file.
KINDLING_WORKER(zero_saves_or_resumes) {
  initialize();
  const std::string file = std::getenv("ZERO_TEST_FILE");
  const torch::optim::AdamOptions options(1e-2);
  torch::manual_seed(77);
  Net net;
  if (std::getenv("ZERO_TEST_SAVE")) {
    kn::ZeroRedundancyOptimizer zero(groups_of(net, options), options);
    train(net, zero, kn::DdpOptions().comm_hook(zero.comm_hook()), 0, 3);
    auto sd = kindling::new_state_dict();
    sd.insert("weights", flat_parameters(net));
    sd.insert("optimizer", zero.state_dict());
    if (kd::get_rank() == 0) {
      const auto bytes = torch::pickle_save(sd);
      std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }

    kd::finalize();
    return;
  }
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto sd = torch::pickle_load(bytes).toGenericDict();
  const auto weights = sd.at("weights").toTensor();
  auto load_weights = [&](Net& into) {
    torch::NoGradGuard no_grad;
    int64_t at = 0;
    for (auto& p : into->parameters()) {
      p.copy_(weights.narrow(0, at, p.numel()).view(p.sizes()));
      at += p.numel();
    }
  };
  Net plain_net;
  load_weights(plain_net);
  torch::optim::Adam plain(groups_of(plain_net, options), options);
  kn::load_optimizer_state_dict(plain, sd.at("optimizer").toGenericDict());
  train(plain_net, plain, kn::DdpOptions(), 3, 3);  // must leave `sd` as it was (the state is copied in)
  load_weights(net);
  // Resumed with the step inside backward: the loaded state goes to each bucket's inner optimizer.
  kn::ZeroRedundancyOptimizer zero(groups_of(net, options), options, kn::ZeroOptions().overlap_with_ddp(true));
  zero.load_state_dict(sd.at("optimizer").toGenericDict());
  train(net, zero, kn::DdpOptions().comm_hook(zero.comm_hook()), 3, 3);
  expect_close(flat_parameters(net), flat_parameters(plain_net), "resumed weights");
  expect_same_state(zero.state_dict(), kn::optimizer_state_dict(plain), "resumed");
  kd::finalize();
}

TEST(Zero, ResumesAtAnotherWorldSize) {
  const kindling::testing::TempDir dir_folder("zero");
  const std::string dir = dir_folder.path();
  LaunchOptions opts;
  opts.env = {{"ZERO_TEST_FILE", dir + "/state.pt"}, {"ZERO_TEST_SAVE", "1"}};
  auto saved = run_workers("zero_saves_or_resumes", opts);
  for (const auto& r : saved) ASSERT_TRUE(r.ok()) << describe(saved);
  // Python torch's own Adam loads the consolidated state and steps on from it.
  const auto python = kindling::testing::run_command(
      {KINDLING_PYTHON, std::string(KINDLING_SOURCE_DIR) + "/tests/nn/zero_state_in_python.py", dir + "/state.pt"}, {},
      std::chrono::seconds(120));
  ASSERT_TRUE(python.ok()) << python.out << python.err;
  EXPECT_NE(python.out.find("loaded into torch.optim.Adam: groups=2 states=6 lr=0.0025,0.005 step=4"), std::string::npos)
      << python.out;
  opts.env["ZERO_TEST_SAVE"] = "";
  opts.world_size = 3;
  auto resumed = run_workers("zero_saves_or_resumes", opts);
  for (const auto& r : resumed) EXPECT_TRUE(r.ok()) << describe(resumed);
}

// One process, no distributed model: the ordinary optimizer, bit for bit.
TEST(Zero, SerialIsTheOrdinaryOptimizer) {
  const torch::optim::AdamOptions options(1e-2);
  torch::manual_seed(3);
  Net plain_net;
  torch::optim::Adam plain(groups_of(plain_net, options), options);
  train(plain_net, plain, kn::DdpOptions(), 0, 3);
  torch::manual_seed(3);
  Net net;
  kn::ZeroRedundancyOptimizer zero(groups_of(net, options), options);
  train(net, zero, kn::DdpOptions().comm_hook(zero.comm_hook()), 0, 3);
  EXPECT_TRUE(torch::equal(flat_parameters(net), flat_parameters(plain_net)));
  EXPECT_EQ(zero.local_state_numel(), state_numel(kn::optimizer_state_dict(plain)));
}

TEST(Zero, RefusesOtherOptimizers) {
  Net net;
  try {
    kn::ZeroRedundancyOptimizer zero(net->parameters(), torch::optim::RMSpropOptions(0.1));
    FAIL() << "RMSprop accepted";
  } catch (const kindling::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("only torch::optim::SGDOptions, AdamOptions and AdamWOptions"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("RMSpropOptions"), std::string::npos) << e.what();
  }
}

}  // namespace zero_test
