// Join (kindling/nn/join.h): ranks given different numbers of batches train to the model of
// torch's Join semantics (each iteration averages the gradients of the ranks still training,
// divided by the group's size or by their number), nobody hangs, every rank ends with the same
// model; with find_unused_parameters, a ZeroRedundancyOptimizer, a rank with no batch at all;
// misuse refused. Real processes on every CPU backend, at 2 and 3 ranks.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/engine/state_dict.h>
#include <kindling/error.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/join.h>
#include <kindling/nn/zero.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <torch/serialize.h>

#include <fstream>
#include <string>
#include <vector>

#include "support/backend_world_test.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;

namespace join_test {

struct NetImpl : torch::nn::Module {
  NetImpl() {
    a = register_module("a", torch::nn::Linear(6, 16));
    b = register_module("b", torch::nn::Linear(16, 3));
    side = register_module("side", torch::nn::Linear(16, 3));  // used only with `use_side`
  }
  torch::Tensor forward(torch::Tensor x, bool use_side) {
    auto h = torch::tanh(a(x));
    return use_side ? b(h) + side(h) : b(h);
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, side{nullptr};
};
TORCH_MODULE(Net);

struct Recipe {
  std::string name;
  std::vector<int> batches;  // per rank (the first world-size entries)
  bool divide_by_world = true;
  bool joined_step = true;   // joined ranks step their optimizer (else: the final broadcast only)
  bool unused = false;       // `side` unused (find_unused_parameters)
  bool zero = false;         // ZeroRedundancyOptimizer with Adam (else SGD with momentum)
};

std::pair<torch::Tensor, torch::Tensor> batch(int rank, int step) {
  torch::manual_seed(500 + 31 * rank + step);
  auto x = torch::randn({4, 6});
  return {x, torch::randn({4, 3})};
}

std::unique_ptr<torch::optim::Optimizer> plain_optimizer(Net& net, bool adam) {
  if (adam) return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.02));
  return std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

torch::Tensor flat(Net& net) {
  std::vector<torch::Tensor> all;
  for (const auto& p : net->parameters()) all.push_back(p.detach().reshape({-1}).clone());
  return torch::cat(all);
}

// torch's Join semantics computed in one process: iteration t averages the gradients of the
// ranks that still have a batch t (their sum over the group's size, or over their number).
torch::Tensor reference(const Recipe& recipe, int world) {
  torch::manual_seed(9);
  Net net;
  auto optimizer = plain_optimizer(net, recipe.zero);
  const int steps = *std::max_element(recipe.batches.begin(), recipe.batches.begin() + world);
  for (int t = 0; t < steps; ++t) {
    optimizer->zero_grad();
    int active = 0;
    for (int r = 0; r < world; ++r) {
      if (t >= recipe.batches[r]) continue;
      ++active;
      auto [x, y] = batch(r, t);
      torch::mse_loss(net(x, !recipe.unused), y).backward();
    }
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters())
      if (p.grad().defined()) p.mutable_grad().div_(recipe.divide_by_world ? world : active);
    optimizer->step();
  }
  return flat(net);
}

// Trains `recipe` with kindling's Join, checks it against the reference, returns the weights.
torch::Tensor run(const Recipe& recipe) {
  const int rank = kd::get_rank(), world = kd::get_world_size();
  torch::manual_seed(9);
  Net net;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  auto options = kn::DdpOptions().bucket_cap_mb(0.001).find_unused_parameters(recipe.unused);
  if (recipe.zero) {
    auto zero = std::make_unique<kn::ZeroRedundancyOptimizer>(net->parameters(), torch::optim::AdamOptions(0.02));
    options.comm_hook(zero->comm_hook());
    optimizer = std::move(zero);
  }
  auto model = kd::auto_model(net, options);
  if (!optimizer) optimizer = plain_optimizer(net, false);
  kn::Join join(model, kn::JoinOptions().divide_by_initial_world_size(recipe.divide_by_world));
  for (int t = 0; t < recipe.batches[rank]; ++t) {
    optimizer->zero_grad();
    auto [x, y] = batch(rank, t);
    torch::mse_loss(model(x, !recipe.unused), y).backward();
    optimizer->step();
  }
  if (recipe.joined_step) {
    join.join([&] { optimizer->step(); });
  } else {
    join.join();
  }
  const int steps = *std::max_element(recipe.batches.begin(), recipe.batches.begin() + world);
  WCHECK(join.shadowed_iterations() == steps - recipe.batches[rank],
         << recipe.name << ": rank " << rank << " mirrored " << join.shadowed_iterations() << " iterations");
  const auto mine = flat(net);
  const auto all = kd::all_gather(mine.unsqueeze(0));
  for (int r = 0; r < world; ++r)
    WCHECK(torch::equal(all[r], mine), << recipe.name << ": rank " << r << "'s model differs from rank " << rank << "'s");
  const auto expected = reference(recipe, world);
  WCHECK(torch::allclose(mine, expected, 1e-5, 1e-6),
         << recipe.name << ": max difference from the reference " << (mine - expected).abs().max().item<double>());
  return mine;
}

KINDLING_WORKER(join_trains_uneven_inputs) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const std::vector<Recipe> recipes{
      {"joined ranks step", {3, 1, 5}},
      {"final broadcast only", {3, 1, 5}, true, false},
      {"divided by the ranks training", {2, 4, 1}, false},
      {"unused parameters", {1, 3, 2}, true, true, true},
      {"zero redundancy optimizer", {4, 2, 3}, true, true, false, true},
      {"a rank with no batch", {2, 0, 3}},
  };
  for (const auto& recipe : recipes) run(recipe);
  kd::finalize();
}

KINDLING_WORKER(join_refuses_misuse) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  auto message_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const kindling::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  {
    auto model = kd::auto_model(Net(), kn::DdpOptions().static_graph(true));
    const auto m = message_of([&] { kn::Join join(model); });
    WCHECK(m.find("static_graph") != std::string::npos, << m);
  }
  {
    auto model = kd::auto_model(Net(), kn::DdpOptions().find_unused_parameters(true));
    kn::Join join(model);
    const auto m = message_of([&] { kn::Join second(model); });
    WCHECK(m.find("already in a Join") != std::string::npos, << m);
    join.join();
    const auto twice = message_of([&] { join.join(); });
    WCHECK(twice.find("called twice") != std::string::npos, << twice);
  }
  {
    Net net;
    kn::ZeroRedundancyOptimizer zero(net->parameters(), torch::optim::SGDOptions(0.1));
    auto model = kd::auto_model(net, kn::DdpOptions().comm_hook(zero.comm_hook()).find_unused_parameters(true));
    kn::Join join(model);
    const auto m = message_of([&] { join.join(); });
    WCHECK(m.find("join.join([&] { optimizer.step(); })") != std::string::npos, << m);
  }
  kd::finalize();
}

// The cases torch's own Join runs in Python (tests/python/join_peer.py): the joined ranks do not
// step (torch's way), the initial weights, every rank's batches and kindling's final weights.
KINDLING_WORKER(join_cases_for_python) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int world = kd::get_world_size();
  const std::vector<Recipe> recipes{
      {"torch's join", {3, 1, 5}, true, false},
      {"divided by the ranks training", {2, 4, 1}, false, false},
      {"unused parameters", {1, 0, 2}, true, false, true},
  };
  c10::impl::GenericList cases(c10::AnyType::get());
  for (const auto& recipe : recipes) {
    torch::manual_seed(9);
    Net fresh;
    c10::impl::GenericList data(c10::AnyType::get());
    for (int r = 0; r < world; ++r) {
      c10::impl::GenericList steps(c10::AnyType::get());
      for (int t = 0; t < recipe.batches[r]; ++t) {
        auto [x, y] = batch(r, t);
        steps.push_back(c10::ivalue::Tuple::create(x, y));
      }
      data.push_back(steps);
    }
    auto c = kindling::new_state_dict();
    c.insert("name", recipe.name);
    c.insert("unused", recipe.unused);
    c.insert("divide_by_world", recipe.divide_by_world);
    c.insert("init", flat(fresh));
    c.insert("data", data);
    c.insert("final", run(recipe));
    cases.push_back(c);
  }
  if (kd::get_rank() == 0) {
    const auto bytes = torch::pickle_save(cases);
    std::ofstream(std::getenv("JOIN_CASES_FILE"), std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  kd::finalize();
}

TEST(JoinPeer, TorchsOwnJoinInPythonTrainsTheSameModel) {
  const kindling::testing::TempDir folder("join");
  const std::string file = folder.path() + "/cases.pt";
  kindling::testing::LaunchOptions opts;
  opts.world_size = 3;
  opts.env = {{"JOIN_CASES_FILE", file}};
  auto ours = kindling::testing::run_workers("join_cases_for_python", opts);
  for (const auto& r : ours) ASSERT_TRUE(r.ok()) << kindling::testing::describe(ours);
  for (int r = 0; r < opts.world_size; ++r)
    opts.commands[r] = {KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/python/join_peer.py", file};
  auto theirs = kindling::testing::run_workers("join_cases_for_python", opts);
  for (const auto& r : theirs) ASSERT_TRUE(r.ok()) << kindling::testing::describe(theirs);
  for (const char* name : {"torch's join", "divided by the ranks training", "unused parameters"})
    EXPECT_NE(theirs[0].out.find(std::string("MATCH ") + name + ":"), std::string::npos) << theirs[0].out;
}

class JoinTest : public kindling::testing::BackendWorldTest {};
TEST_P(JoinTest, UnevenInputsTrainAsTorchsJoin) { expect_ok("join_trains_uneven_inputs"); }
INSTANTIATE_TEST_SUITE_P(Backends, JoinTest, ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

// Local checks: one backend, two ranks are enough.
TEST(Join, RefusesMisuse) {
  kindling::testing::LaunchOptions opts;
  auto results = kindling::testing::run_workers("join_refuses_misuse", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
}

}  // namespace join_test
