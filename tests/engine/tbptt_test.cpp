// create_supervised_tbptt_trainer (kindling/engine/tbptt.h): each chunk's loss, each iteration's
// output and the trained parameters equal ignite 0.5.5's create_supervised_tbptt_trainer on the
// same problem (tests/engine/ignite_tbptt.py, where the build's Python has ignite: the LibTorch
// 2.15 venv); the chunk events fire once per chunk with their own counter; misuse is refused.
#include <gtest/gtest.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/tbptt.h"
#include "support/errors.h"
#include "support/multiprocess.h"

namespace tbptt_test {

namespace ke = kindling::engine;
using ke::Engine;
using ke::Events;
using ke::TbpttEvents;
using kindling::testing::error_of;

// ignite_tbptt.py's model: GRU(3 -> 4) then Linear(4 -> 2), in float64, with its initial values.
struct Recurrent : torch::nn::Module {
  Recurrent() {
    gru = register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(3, 4)));
    head = register_module("head", torch::nn::Linear(4, 2));
    to(at::kDouble);
    at::NoGradGuard no_grad;
    int index = 0;
    for (auto& p : named_parameters()) {
      const at::Tensor k = at::arange(p.value().numel(), at::kDouble);
      p.value().copy_((0.5 * at::sin(0.37 * k + index++)).reshape(p.value().sizes()));
    }
  }
  std::pair<at::Tensor, std::vector<at::Tensor>> step(const at::Tensor& x, const std::vector<at::Tensor>& hidden) {
    auto [out, h] = hidden.empty() ? gru->forward(x) : gru->forward(x, hidden[0]);
    return {head->forward(out), {h}};
  }
  torch::nn::GRU gru{nullptr};
  torch::nn::Linear head{nullptr};
};

kindling::data::Example batch(int n) {
  at::Tensor x = at::empty({10, 2, 3}, at::kDouble), y = at::empty({10, 2, 2}, at::kDouble);
  for (int t = 0; t < 10; ++t) {
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < 3; ++i) x[t][b][i] = std::cos(0.1 * t + 0.7 * b + 0.3 * i + n);
      for (int j = 0; j < 2; ++j) y[t][b][j] = std::sin(0.2 * t + b - j + 0.5 * n);
    }
  }
  return {x, y};
}

at::Tensor mse(const at::Tensor& a, const at::Tensor& b) { return at::mse_loss(a, b); }

std::vector<double> numbers(const std::string& text) {
  std::vector<double> out;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) out.push_back(std::stod(item));
  return out;
}

void expect_close(const std::vector<double>& mine, const std::vector<double>& ignite, const std::string& what) {
  ASSERT_EQ(mine.size(), ignite.size()) << what;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    EXPECT_NEAR(mine[i], ignite[i], 1e-9 * std::max(1.0, std::abs(ignite[i]))) << what << "[" << i << "]";
  }
}

TEST(TbpttTest, EqualsIgnite055ChunkByChunk) {
  const auto r = kindling::testing::run_command({KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/engine/ignite_tbptt.py"});
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  ASSERT_TRUE(r.ok()) << kindling::testing::describe({r});
  std::map<std::string, std::vector<double>> ignite;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string kind, name, values;
    words >> kind;
    if (kind == "PARAM") words >> name;
    words >> values;
    if (kind != "IGNITE") ignite[kind == "PARAM" ? name : kind] = numbers(values);
  }
  auto model = std::make_shared<Recurrent>();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Engine trainer = ke::create_supervised_tbptt_trainer(
      *model, optimizer, mse, 4,
      [&](const at::Tensor& x, const std::vector<at::Tensor>& h) { return model->step(x, h); });
  std::vector<double> chunks, iterations;
  trainer.on(TbpttEvents::TIME_ITERATION_COMPLETED, [&](Engine& e) { chunks.push_back(e.state().output.number()); });
  trainer.on(Events::ITERATION_COMPLETED, [&](Engine& e) { iterations.push_back(e.state().output.number()); });
  int64_t started = 0, every_third = 0;
  trainer.on(TbpttEvents::TIME_ITERATION_STARTED, [&] { ++started; });
  trainer.on(TbpttEvents::TIME_ITERATION_COMPLETED.every(3), [&] { ++every_third; });
  trainer.run(std::vector<kindling::data::Example>{batch(0), batch(1)}, 2);
  EXPECT_EQ(started, 12);  // 3 chunks (4, 4, 2 steps) x 2 batches x 2 epochs
  EXPECT_EQ(every_third, 4);
  expect_close(chunks, ignite.at("CHUNKS"), "chunk loss");
  expect_close(iterations, ignite.at("ITERATIONS"), "iteration output");
  for (const auto& p : model->named_parameters()) {
    const at::Tensor flat = p.value().detach().reshape({-1}).contiguous();
    expect_close(std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel()),
                 ignite.at(p.key()), p.key());
  }
}

TEST(TbpttTest, MisuseIsRefusedWithTheShapes) {
  auto model = std::make_shared<Recurrent>();
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto forward = [&](const at::Tensor& x, const std::vector<at::Tensor>& h) { return model->step(x, h); };
  EXPECT_NE(error_of([&] {
              ke::create_supervised_tbptt_trainer(*model, optimizer, mse, 0, forward);
            }).find("tbtt_step must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { ke::create_supervised_tbptt_trainer(*model, optimizer, mse, 2, {}); }).find("forward is empty"),
      std::string::npos);
  Engine trainer = ke::create_supervised_tbptt_trainer(*model, optimizer, mse, 2, forward);
  kindling::data::Example uneven = batch(0);
  uneven.target = uneven.target.narrow(0, 0, 7);
  const std::string message = error_of([&] { trainer.run(std::vector<kindling::data::Example>{uneven}, 1); });
  EXPECT_NE(message.find("x [10, 2, 3] and y [7, 2, 2] have different lengths along the time dimension 0 (10 vs 7)"),
            std::string::npos)
      << message;
  Engine wrong_dim =
      ke::create_supervised_tbptt_trainer(*model, optimizer, mse, 2, forward, ke::TbpttTrainerOptions().dim(3));
  EXPECT_NE(error_of([&] {
              wrong_dim.run(std::vector<kindling::data::Example>{batch(0)}, 1);
            }).find("time dimension 3 is not a dimension of x [10, 2, 3]"),
            std::string::npos);
}

}  // namespace tbptt_test
