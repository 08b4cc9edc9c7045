// The timeline (kindling/handlers/profilers/timeline.h, kindling/timeline.h): real ranks train a
// DDP model with the supervised trainer, a watched evaluator and a checkpoint write inside the
// range; tests/dist/check_timeline.py reads the Chrome traces (valid JSON, each rank's spans,
// rows that nest, the ranks on one clock: no collective ends anywhere before every rank started
// it) and compares them with DDP's own per-step breakdown.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <kindling/kindling.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace ke = kindling::engine;
namespace kh = kindling::handlers;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_command;
using kindling::testing::run_workers;

namespace timeline_test {

constexpr int64_t kFirst = 3, kLast = 5;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : a(register_module("a", torch::nn::Linear(32, 64))),
        b(register_module("b", torch::nn::Linear(64, 64))),
        c(register_module("c", torch::nn::Linear(64, 4))) {}
  at::Tensor forward(const at::Tensor& x) { return c(at::relu(b(at::relu(a(x))))); }
  torch::nn::Linear a, b, c;
};
TORCH_MODULE(Net);

std::vector<kindling::data::Example> batches(int n, int seed) {
  torch::manual_seed(seed);
  std::vector<kindling::data::Example> out;
  for (int i = 0; i < n; ++i) out.push_back({at::randn({16, 32}), at::randn({16, 4})});
  return out;
}

at::Tensor mse(const at::Tensor& y_pred, const at::Tensor& y) { return at::mse_loss(y_pred, y); }

}  // namespace timeline_test

// Trains 6 iterations; the timeline records 3 to 5, with an evaluation (watched) and a checkpoint
// write at 4. Each rank writes DDP's StepTimes of the range for the checker.
KINDLING_WORKER(timeline_ddp) {
  using timeline_test::kFirst;
  using timeline_test::kLast;
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const std::string dir = std::getenv("TIMELINE_DIR");
  // Buckets of about one layer each, so that the first ones are reduced during backward.
  auto model = kd::auto_model(timeline_test::Net(), kindling::nn::DdpOptions().bucket_cap_mb(0.01));
  torch::optim::SGD opt(model->parameters(), 0.01);
  ke::Engine trainer = ke::create_supervised_trainer(model, opt, timeline_test::mse);
  ke::Engine evaluator = ke::create_supervised_evaluator(model);
  auto timeline = std::make_shared<kh::Timeline>(
      kh::TimelineOptions().folder(dir + "/trace").first_iteration(kFirst).last_iteration(kLast));
  timeline->attach(trainer);
  timeline->watch(evaluator, "evaluator");
  const auto validation = timeline_test::batches(2, 9);
  kh::DiskSaver saver(dir + "/checkpoints");
  trainer.on(ke::Events::ITERATION_COMPLETED.once(4), [&] {
    evaluator.run(validation, 1);
    saver.save(std::vector<char>(4096, 'k'), "model_4.pt");
  });
  std::ofstream steps(dir + "/steps_rank_" + std::to_string(kd::get_rank()) + ".json");
  steps << "[";
  trainer.on(ke::Events::ITERATION_COMPLETED, [&](ke::Engine& e) {
    const int64_t it = e.state().iteration;
    WCHECK(timeline->recording() == (it >= kFirst && it <= kLast), << "recording() at iteration " << it);
    if (it < kFirst || it > kLast) return;
    const auto t = model.reducer()->last_step_times();
    steps << (it > kFirst ? "," : "") << "{\"iteration\":" << it << ",\"forward\":" << t.forward
          << ",\"backward\":" << t.backward << ",\"communication_wait\":" << t.communication_wait
          << ",\"write_back\":" << t.write_back << "}";
  });
  trainer.run(timeline_test::batches(6, 1 + kd::get_rank()), 1);
  steps << "]";
  steps.close();
  const auto files = timeline->files();
  WCHECK(files.size() == (kd::get_rank() == 0 ? 2u : 1u), << files.size() << " files written");
  WCHECK(timeline->ranks().size() == (kd::get_rank() == 0 ? static_cast<std::size_t>(kd::get_world_size()) : 1u),
         << timeline->ranks().size() << " ranks held");
  kd::finalize();
}

class TimelineRanksTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(TimelineRanksTest, EveryRankOnOneClockAgreeingWithTheStepBreakdown) {
  kindling::testing::TempDir dir("timeline");
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  opts.deadline = std::chrono::seconds(120);
  opts.env["TIMELINE_DIR"] = dir.path();
  auto results = run_workers("timeline_ddp", opts);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << describe(results);
  const auto checked = run_command({KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/dist/check_timeline.py", dir.path(),
                                    std::to_string(opts.world_size), opts.backend,
                                    std::to_string(timeline_test::kFirst), std::to_string(timeline_test::kLast)},
                                   {}, std::chrono::seconds(120));
  EXPECT_TRUE(checked.ok()) << checked.out << checked.err;
  std::cout << checked.out;
}

INSTANTIATE_TEST_SUITE_P(Backends, TimelineRanksTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

// The clock measurement alone: on one host every process reads the same steady clock, so each
// offset found is 0 within its uncertainty; and a bad round count is refused before any message.
KINDLING_WORKER(clock_offset) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const auto offset = kd::measure_clock_offset(16);
  WCHECK(kd::get_rank() != 0 || (offset.offset_ns == 0 && offset.uncertainty_ns == 0),
         << "rank 0: " << offset.offset_ns << " +- " << offset.uncertainty_ns);
  WCHECK(offset.uncertainty_ns >= 0 && offset.uncertainty_ns < 5000000, << "uncertainty " << offset.uncertainty_ns);
  WCHECK(std::llabs(offset.offset_ns) <= offset.uncertainty_ns + 200000,
         << "offset " << offset.offset_ns << " ns, uncertainty " << offset.uncertainty_ns << " ns");
  bool refused = false;
  try {
    kd::measure_clock_offset(0);
  } catch (const kindling::UsageError& e) {
    refused = std::string(e.what()).find("rounds=0") != std::string::npos;
  }
  WCHECK(refused, << "rounds=0 was not refused with its value");
  kd::finalize();
}

class ClockOffsetTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ClockOffsetTest, OneHostsRanksShareTheirClock) {
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  opts.deadline = std::chrono::seconds(60);
  auto results = run_workers("clock_offset", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

INSTANTIATE_TEST_SUITE_P(Backends, ClockOffsetTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });
