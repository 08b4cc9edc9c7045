// TensorboardLogger's parameter handlers (ignite's WeightsHistHandler, GradsHistHandler,
// WeightsScalarHandler, GradsScalarHandler) and add_histogram: real histogram summaries that
// the independent reader (tests/handlers/read_tfevents.py) and TensorBoard's own
// EventAccumulator both parse; each histogram recounted here from the parameter's values at
// that step; extreme ranges and values on edges; norms; reductions given detached tensors;
// non-finite values; errors; and ignite's common.setup_tb_logging (also with its logger
// dropped, on 2 ranks).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/common.h"
#include "kindling/handlers/loggers/tensorboard.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;

// Two layers, named as a user's module would name them.
struct ParamsNet : torch::nn::Module {
  ParamsNet() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 1));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(at::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// One histogram as a reader printed it.
struct Histo {
  int64_t step = 0;
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> limits, counts;
  std::string tag;
};

// A number as Python's repr() printed it: strtod, not std::stod, which refuses subnormals
// (ERANGE) and istream's >>, which refuses "inf".
double number_of(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

std::vector<double> split_numbers(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(number_of(item));
  return out;
}

// "HISTO <step> <min> <max> <num> <sum> <sum_squares> <limits> <counts> <tag>" lines of a
// reader's output, and its "SCALAR <step> <value> <wall_time> <tag>" lines as tag -> values.
struct ReaderOutput {
  std::vector<Histo> histograms;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> scalars;
  std::vector<std::string> histo_lines;
};

ReaderOutput parse_reader(const std::string& out) {
  ReaderOutput result;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "HISTO") {
      Histo h;
      std::string numbers[5], limits, counts;  // a sum of squares may overflow to "inf"
      in >> h.step >> numbers[0] >> numbers[1] >> numbers[2] >> numbers[3] >> numbers[4] >> limits >> counts >> h.tag;
      double* fields[5] = {&h.min, &h.max, &h.num, &h.sum, &h.sum_squares};
      for (int i = 0; i < 5; ++i) *fields[i] = number_of(numbers[i]);
      h.limits = split_numbers(limits);
      h.counts = split_numbers(counts);
      result.histograms.push_back(h);
      result.histo_lines.push_back(line);
    } else if (kind == "SCALAR") {
      int64_t step = 0;
      double value = 0, wall_time = 0;
      std::string tag;
      in >> step >> value >> wall_time >> tag;
      result.scalars[tag].emplace_back(step, value);
    }
  }
  return result;
}

ReaderOutput read_independently(const std::string& path) {
  const auto r =
      kindling::testing::run_command({KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/handlers/read_tfevents.py", path});
  EXPECT_TRUE(r.ok()) << kindling::testing::describe({r});
  return parse_reader(r.out);
}

ReaderOutput read_with_tensorboard(const std::string& path) {
  const auto peer = kindling::testing::run_command({KINDLING_SOURCE_DIR "/scripts/python-peer.sh", KINDLING_PYTHON});
  EXPECT_TRUE(peer.ok()) << kindling::testing::describe({peer});
  const std::string python = peer.out.substr(0, peer.out.find('\n'));
  const auto r = kindling::testing::run_command(
      {python, KINDLING_SOURCE_DIR "/tests/handlers/read_tfevents_tensorboard.py", path});
  EXPECT_TRUE(r.ok()) << kindling::testing::describe({r});
  return parse_reader(r.out);
}

// Checks one histogram against the values it summarises: the statistics, equal-width buckets
// from min to max, and each bucket's count recounted from the values.
void expect_histogram_of(const Histo& h, const at::Tensor& values, int bins) {
  const at::Tensor v = values.to(at::kDouble).reshape({-1});
  const double mn = v.min().item<double>(), mx = v.max().item<double>();
  EXPECT_EQ(h.min, mn) << h.tag;
  EXPECT_EQ(h.max, mx) << h.tag;
  EXPECT_EQ(h.num, static_cast<double>(v.numel())) << h.tag;
  EXPECT_NEAR(h.sum, v.sum().item<double>(), 1e-12 * std::max(1.0, v.abs().sum().item<double>())) << h.tag;
  EXPECT_NEAR(h.sum_squares, (v * v).sum().item<double>(), 1e-12 * std::max(1.0, (v * v).sum().item<double>()))
      << h.tag;
  ASSERT_EQ(h.limits.size(), static_cast<std::size_t>(bins)) << h.tag;
  ASSERT_EQ(h.counts.size(), h.limits.size()) << h.tag;
  EXPECT_EQ(h.limits.back(), mx) << h.tag;
  double lower = mn, total = 0;
  for (std::size_t b = 0; b < h.limits.size(); ++b) {
    EXPECT_NEAR(h.limits[b] - lower, (mx - mn) / bins, 1e-12 * (mx - mn)) << h.tag << " bucket " << b;
    const bool last = b + 1 == h.limits.size();
    const double in_bucket = ((v >= lower) & (last ? v <= h.limits[b] : v < h.limits[b])).sum().item<double>();
    EXPECT_EQ(h.counts[b], in_bucket) << h.tag << " bucket " << b;
    total += h.counts[b];
    lower = h.limits[b];
  }
  EXPECT_EQ(total, static_cast<double>(v.numel())) << h.tag;
}

TEST(TensorboardParamsTest, HistogramsAndNormsOfWeightsAndGradsReadBackInBothReaders) {
  kindling::testing::TempDir dir("tb_params");
  auto net = std::make_shared<ParamsNet>();
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
  const at::Tensor x = at::randn({16, 4}), y = at::randn({16, 1});
  Engine trainer([&](Engine&, const int&) {
    optimizer.zero_grad();
    auto loss = at::mse_loss(net->forward(x), y);
    loss.backward();
    optimizer.step();
    return loss.item<double>();
  });
  // What the handlers should have seen, kept at the same events by a handler attached after them.
  std::map<int64_t, std::map<std::string, at::Tensor>> seen;
  std::string path;
  {
    kh::TensorboardLogger tb(dir.path() + "/runs");
    path = tb.file_path();
    const auto every2 = Events::ITERATION_COMPLETED.every(2);
    tb.attach_weights_hist_handler(trainer, every2, *net, "", {}, 7);
    tb.attach_grads_hist_handler(trainer, every2, *net, "train", {"fc1."}, 5);
    tb.attach_weights_scalar_handler(trainer, every2, *net);
    tb.attach_grads_scalar_handler(trainer, every2, *net, kh::ParamReduction::norm(), "train");
    trainer.on(every2, [&](Engine& e) {
      for (const auto& p : net->named_parameters()) {
        seen[e.state().iteration]["w " + p.key()] = p.value().detach().clone();
        seen[e.state().iteration]["g " + p.key()] = p.value().grad().clone();
      }
    });
    std::vector<int> data(4, 0);
    trainer.run(data, 1);
    tb.close();
  }
  const ReaderOutput got = read_independently(path);
  // Steps 2 and 4: 4 weight histograms, 2 gradient histograms (fc1 only), in that order.
  ASSERT_EQ(got.histograms.size(), 12u);
  const std::vector<std::pair<std::string, std::string>> order{
      {"weights/fc1/weight", "w fc1.weight"},     {"weights/fc1/bias", "w fc1.bias"},
      {"weights/fc2/weight", "w fc2.weight"},     {"weights/fc2/bias", "w fc2.bias"},
      {"train/grads/fc1/weight", "g fc1.weight"}, {"train/grads/fc1/bias", "g fc1.bias"}};
  for (std::size_t i = 0; i < got.histograms.size(); ++i) {
    const Histo& h = got.histograms[i];
    const auto& [tag, key] = order[i % order.size()];
    EXPECT_EQ(h.tag, tag);
    EXPECT_EQ(h.step, i < order.size() ? 2 : 4) << tag;
    const int bins = tag.rfind("train/", 0) == 0 ? 5 : (tag == "weights/fc2/bias" ? 1 : 7);  // one value: one bucket
    expect_histogram_of(h, seen.at(h.step).at(key), bins);
  }
  for (const auto& p : net->named_parameters()) {
    std::string name = p.key();
    std::replace(name.begin(), name.end(), '.', '/');
    for (const auto& [prefix, kind] :
         {std::pair<std::string, std::string>{"weights_norm/", "w "}, {"train/grads_norm/", "g "}}) {
      const auto& values = got.scalars.at(prefix + name);
      ASSERT_EQ(values.size(), 2u) << prefix + name;
      for (const auto& [step, value] : values) {
        const double expected = seen.at(step).at(kind + p.key()).to(at::kDouble).norm().item<double>();
        EXPECT_EQ(static_cast<float>(value), static_cast<float>(expected)) << prefix + name << " at " << step;
      }
    }
  }
  // TensorBoard's own reader sees the same histograms, number for number.
  const ReaderOutput tb = read_with_tensorboard(path);
  std::vector<std::string> mine = got.histo_lines, theirs = tb.histo_lines;
  std::sort(mine.begin(), mine.end());
  std::sort(theirs.begin(), theirs.end());
  EXPECT_EQ(theirs, mine);
}

TEST(TensorboardParamsTest, AddHistogramLeavesOutNonFiniteValuesAndWarnsOnce) {
  kindling::testing::TempDir dir("tb_hist");
  std::string path;
  const at::Tensor values = at::tensor({1.0, 2.0, std::nan(""), 4.0, INFINITY, 2.5}, at::kDouble);
  {
    kh::TensorboardLogger tb(dir.path());
    path = tb.file_path();
    ::testing::internal::CaptureStderr();
    tb.add_histogram("h", values, 3, 3);
    tb.add_histogram("h", values, 4, 3);
    tb.add_histogram("same", at::full({5}, 2.0), 1);           // all equal: one bucket
    tb.add_histogram("none", at::full({2}, std::nan("")), 1);  // nothing finite: not written
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("the histogram 'h' left out 2 of 6 elements that are NaN or infinite"), std::string::npos)
        << err;
    EXPECT_EQ(kindling::testing::occurrences(err, "left out"), 2) << "one warning for 'h', one for 'none':\n" << err;
    EXPECT_EQ(kindling::testing::occurrences(err, "'none' left out 2 of 2"), 1) << err;
    tb.close();
  }
  const ReaderOutput got = read_independently(path);
  ASSERT_EQ(got.histograms.size(), 3u);
  const at::Tensor finite = at::tensor({1.0, 2.0, 4.0, 2.5}, at::kDouble);
  expect_histogram_of(got.histograms[0], finite, 3);
  EXPECT_EQ(got.histograms[0].counts, (std::vector<double>{1, 2, 1}));  // [1, 2), [2, 3), [3, 4]
  EXPECT_EQ(got.histograms[1].step, 4);
  EXPECT_EQ(got.histograms[2].tag, "same");
  EXPECT_EQ(got.histograms[2].counts, std::vector<double>{5});
  EXPECT_EQ(got.histograms[2].limits, std::vector<double>{2});
}

// Ranges whose width is not a positive finite number (max - min overflows to inf; a subnormal
// range whose width rounds to 0) give one bucket instead of an undefined cast of inf or NaN;
// values on an edge, where (x - min) / width rounds to the other side, are counted as the
// written edges say (numpy.histogram([-2, -1.1, -0.2, 0.7], bins=3) counts 1, 2, 1).
TEST(TensorboardParamsTest, AddHistogramOfExtremeRangesAndValuesOnEdges) {
  kindling::testing::TempDir dir("tb_hist_extreme");
  const double tiny = std::numeric_limits<double>::denorm_min();
  const at::Tensor huge = at::tensor({-1e308, 1e308, 0.0}, at::kDouble);
  const at::Tensor largest =
      at::tensor({-std::numeric_limits<double>::max(), std::numeric_limits<double>::max()}, at::kDouble);
  const at::Tensor subnormal = at::tensor({0.0, 8 * tiny, 3 * tiny}, at::kDouble);
  const at::Tensor edges = at::tensor({-2.0, -1.1, -0.2, 0.7}, at::kDouble);
  std::string path;
  {
    kh::TensorboardLogger tb(dir.path());
    path = tb.file_path();
    tb.add_histogram("huge", huge, 1);
    tb.add_histogram("largest", largest, 1, 4);
    tb.add_histogram("subnormal", subnormal, 1);
    tb.add_histogram("edges", edges, 1, 3);
    tb.close();
  }
  const ReaderOutput got = read_independently(path);
  ASSERT_EQ(got.histograms.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    const Histo& h = got.histograms[static_cast<std::size_t>(i)];
    EXPECT_EQ(h.counts, std::vector<double>{i == 1 ? 2.0 : 3.0}) << h.tag;  // one bucket holding every value
    ASSERT_EQ(h.limits.size(), 1u) << h.tag;
  }
  EXPECT_EQ(got.histograms[0].limits[0], 1e308);
  EXPECT_EQ(got.histograms[0].min, -1e308);
  EXPECT_EQ(got.histograms[1].limits[0], std::numeric_limits<double>::max());
  EXPECT_EQ(got.histograms[2].limits[0], 8 * tiny);
  EXPECT_EQ(got.histograms[2].min, 0.0);
  EXPECT_EQ(got.histograms[3].counts, (std::vector<double>{1, 2, 1}));
  expect_histogram_of(got.histograms[3], edges, 3);  // every count recounted from the written edges
}

// The parameter scalar handlers give the reduction the parameter (or gradient) detached, as
// ignite gives p.data: a reduction cannot build autograd history on the live parameter.
TEST(TensorboardParamsTest, ScalarReductionsSeeDetachedTensors) {
  kindling::testing::TempDir dir("tb_detached");
  ParamsNet net;
  const at::Tensor x = at::randn({3, 4});
  Engine trainer([&](Engine&, const int&) {
    net.zero_grad();
    net.forward(x).sum().backward();
    return 0.0;
  });
  int calls = 0, attached_to_graph = 0;
  const kh::ParamReduction probe{"probe", [&](const at::Tensor& t) {
                                   ++calls;
                                   if (t.requires_grad() || t.grad_fn() != nullptr) ++attached_to_graph;
                                   return t.sum().item<double>();
                                 }};
  kh::TensorboardLogger tb(dir.path());
  tb.attach_weights_scalar_handler(trainer, Events::ITERATION_COMPLETED, net, probe);
  tb.attach_grads_scalar_handler(trainer, Events::ITERATION_COMPLETED, net, probe);
  trainer.run(std::vector<int>(2, 0), 1);
  EXPECT_EQ(calls, 2 * 2 * 4);  // 2 iterations, weights and grads, 4 parameters
  EXPECT_EQ(attached_to_graph, 0);
  for (const auto& p : net.parameters()) EXPECT_TRUE(p.requires_grad());  // the model is untouched
}

TEST(TensorboardParamsTest, MisuseIsRefusedWithWhatToDo) {
  kindling::testing::TempDir dir("tb_params_errors");
  kh::TensorboardLogger tb(dir.path());
  ParamsNet net;
  Engine trainer([](Engine&, const int&) {});
  std::string message = kindling::testing::error_of<kindling::UsageError>(
      [&] { tb.attach_weights_hist_handler(trainer, Events::EPOCH_COMPLETED, net, "", {"conv"}); });
  EXPECT_NE(message.find("attach_weights_hist_handler: no parameter to log"), std::string::npos) << message;
  EXPECT_NE(message.find("fc1.weight, fc1.bias, fc2.weight, fc2.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("conv"), std::string::npos) << message;
  message = kindling::testing::error_of<kindling::UsageError>(
      [&] { tb.attach_grads_hist_handler(trainer, Events::EPOCH_COMPLETED, net, "", {}, 0); });
  EXPECT_NE(message.find("bins must be at least 1, got 0"), std::string::npos) << message;
  message = kindling::testing::error_of<kindling::UsageError>(
      [&] { tb.attach_grads_scalar_handler(trainer, Events::TERMINATE, net); });
  EXPECT_NE(message.find("has no counter"), std::string::npos) << message;
  message = kindling::testing::error_of<kindling::UsageError>([&] {
    tb.attach_weights_scalar_handler(trainer, Events::EPOCH_COMPLETED, net, {"max", nullptr});
  });
  EXPECT_NE(message.find("the reduction has no function"), std::string::npos) << message;
  message = kindling::testing::error_of<kindling::UsageError>([&] { tb.add_histogram("x", at::Tensor(), 0); });
  EXPECT_NE(message.find("'x' is undefined"), std::string::npos) << message;
}

TEST(TensorboardParamsTest, SetupTbLoggingLogsTrainerMetricsLearningRatesAndEvaluators) {
  kindling::testing::TempDir dir("tb_setup");
  ParamsNet net;
  torch::optim::SGD sgd(net.parameters(), torch::optim::SGDOptions(0.25));
  Engine trainer([](Engine& e, const int&) { e.state().metrics["loss"] = 1.0 / e.state().iteration; });
  Engine evaluator([](Engine& e, const int&) { e.state().metrics["accuracy"] = 0.5 + e.state().iteration; });
  trainer.on(Events::EPOCH_COMPLETED, [&] { evaluator.run(std::vector<int>{1, 2}, 1); });
  std::string path;
  {
    auto tb =
        kh::setup_tb_logging(dir.path(), trainer, {{"", &sgd}, {"second", &sgd}}, {{"validation", &evaluator}}, 2);
    path = tb->file_path();
    trainer.run(std::vector<int>(4, 0), 2);
  }
  const ReaderOutput got = read_independently(path);
  using Points = std::vector<std::pair<int64_t, double>>;
  EXPECT_EQ(got.scalars.at("training/loss"),
            (Points{{2, 0.5}, {4, 0.25}, {6, static_cast<float>(1.0 / 6)}, {8, 0.125}}));
  EXPECT_EQ(got.scalars.at("lr/group_0"), (Points{{2, 0.25}, {4, 0.25}, {6, 0.25}, {8, 0.25}}));
  EXPECT_EQ(got.scalars.at("second/lr/group_0").size(), 4u);
  EXPECT_EQ(got.scalars.at("validation/accuracy"), (Points{{1, 2.5}, {2, 2.5}}));  // at the trainer's epoch
  std::string message = kindling::testing::error_of<kindling::UsageError>([&] {
    auto unused = kh::setup_tb_logging(dir.path(), trainer, {}, {{"validation", nullptr}});
  });
  EXPECT_NE(message.find("evaluator 'validation' is a null pointer"), std::string::npos) << message;
  message = kindling::testing::error_of<kindling::UsageError>(
      [&] { auto unused = kh::setup_tb_logging(dir.path(), trainer, {}, {}, 0); });
  EXPECT_NE(message.find("log_every_iters must be at least 1, got 0; pass the number of iterations"), std::string::npos)
      << message;
}

// The logger of setup_tb_logging dropped at once while its handlers stay attached: on rank 0
// the values are dropped with one warning instead of a throw, so rank 0 goes on with the
// others and every rank's collectives (an all_reduce per iteration) still match. (Before,
// rank 0 threw at its first value and rank 1 waited at the next all_reduce until the timeout.)
KINDLING_WORKER(tb_dropped_logger_ranks_go_on) {
  namespace kd = kindling::dist;
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(20)));
  Engine trainer([](Engine& e, const int&) {
    e.state().metrics["loss"] = kd::all_reduce(at::ones({1})).item<double>();  // a collective each iteration
    return 0.0;
  });
  { auto dropped = kh::setup_tb_logging(std::getenv("KINDLING_TEST_DIR"), trainer, {}, {}, 1); }
  trainer.run(std::vector<int>(3, 0), 2);
  WCHECK(trainer.state().iteration == 6, << trainer.state().iteration);
  WCHECK(trainer.state().metrics.at("loss").number() == 2.0);
  kd::finalize();
}

TEST(TensorboardParamsTest, SetupTbLoggingDroppedLoggerWarnsOnceAndTheRanksGoOn) {
  kindling::testing::TempDir dir("tb_dropped");
  kindling::testing::LaunchOptions opts;
  opts.world_size = 2;
  opts.deadline = std::chrono::seconds(45);
  opts.env["KINDLING_TEST_DIR"] = dir.path();
  const auto results = kindling::testing::run_workers("tb_dropped_logger_ranks_go_on", opts);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << kindling::testing::describe(results);
  EXPECT_EQ(kindling::testing::occurrences(results[0].err, "was logged after close()"), 1) << results[0].err;
  EXPECT_NE(results[0].err.find("'training/loss' was logged after close() (or after the logger was destroyed)"),
            std::string::npos)
      << results[0].err;
  EXPECT_EQ(kindling::testing::occurrences(results[1].err, "was logged after close()"), 0) << results[1].err;
}

}  // namespace
