// Entropy, KLDivergence, JSDivergence, MutualInformation (kindling/metrics/information.h),
// HSIC and MaximumMeanDiscrepancy (kernel_dependence.h), VariableAccumulation and
// GeometricAverage (average.h): equal to the real ignite 0.5.5 on the same batches
// (tests/metrics/ignite_cases.py, where the build's Python has it: the LibTorch 2.15 venv), to
// values worked by hand, and they refuse misuse with what they were given. Across ranks (1, 2
// and 3 with an empty shard, gloo and mpi): distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/average.h"
#include "kindling/metrics/information.h"
#include "kindling/metrics/kernel_dependence.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace information_test {

using kindling::testing::batches_of;
using kindling::testing::IgniteCase;
using Batch = kindling::testing::MetricBatch;

std::vector<IgniteCase> information_cases() {
  const auto logits = batches_of(31, [](at::Generator& g, int64_t n) {
    return Batch{2 * at::randn({n, 5}, g), at::randn({n, 5}, g)};
  });
  const auto maps = batches_of(32, [](at::Generator& g, int64_t n) {
    return Batch{at::randn({n, 3, 2, 4}, g), at::randn({n, 3, 2, 4}, g)};
  });
  std::vector<IgniteCase> out;
  for (const auto& [suffix, batches] : {std::pair<std::string, std::vector<Batch>>{"", logits}, {"_maps", maps}}) {
    out.push_back({"entropy" + suffix, "Entropy", "{}", batches, [] { return std::make_shared<km::Entropy>(); }});
    out.push_back({"kl" + suffix, "KLDivergence", "{}", batches, [] { return std::make_shared<km::KLDivergence>(); }});
    out.push_back({"js" + suffix, "JSDivergence", "{}", batches, [] { return std::make_shared<km::JSDivergence>(); }});
    out.push_back({"mutual_information" + suffix, "MutualInformation", "{}", batches,
                   [] { return std::make_shared<km::MutualInformation>(); }});
  }
  return out;
}

std::vector<IgniteCase> kernel_cases() {
  // Features and a nonlinear function of them plus noise: a clear dependence.
  const auto related = batches_of(33, [](at::Generator& g, int64_t n) {
    const at::Tensor x = at::randn({n + 2, 3}, g);
    return Batch{x, at::sin(x.sum(1, true)) + 0.3 * at::randn({n + 2, 2}, g)};
  });
  const auto shifted = batches_of(34, [](at::Generator& g, int64_t n) {
    return Batch{at::randn({n, 2, 3}, g), 0.5 + at::randn({n, 2, 3}, g)};
  });
  // Batches of 3 to 8: HSIC skips the one of 3 (ignite's ignore_invalid_batch).
  const auto small_first = batches_of(35, [](at::Generator& g, int64_t n) {
    const at::Tensor x = at::randn({n, 4}, g);
    return Batch{x, x * x + 0.1 * at::randn({n, 4}, g)};
  });
  return {
      {"hsic", "HSIC", "{}", related, [] { return std::make_shared<km::HSIC>(); }},
      {"hsic_sigmas", "HSIC", R"({"sigma_x": 1.5, "sigma_y": 0.7})", related,
       [] { return std::make_shared<km::HSIC>(1.5, 0.7); }},
      {"hsic_skips_small", "HSIC", "{}", small_first, [] { return std::make_shared<km::HSIC>(); }},
      {"mmd", "MaximumMeanDiscrepancy", "{}", shifted, [] { return std::make_shared<km::MaximumMeanDiscrepancy>(); }},
      {"mmd_var", "MaximumMeanDiscrepancy", R"({"var": 2.5})", shifted,
       [] { return std::make_shared<km::MaximumMeanDiscrepancy>(2.5); }},
  };
}

std::vector<IgniteCase> accumulation_cases() {
  const auto positive = batches_of(36, [](at::Generator& g, int64_t n) {
    return Batch{0.1 + at::rand({n, 3}, g).to(at::kDouble), at::zeros({n})};
  });
  // A 1-D output is one sample (of 3 values here, as ignite counts it).
  const auto rows = batches_of(37, [](at::Generator& g, int64_t) {
    return Batch{0.5 + at::rand({3}, g).to(at::kDouble), at::zeros({3})};
  });
  IgniteCase vectors{"geometric_vectors", "GeometricAverage", "{}", positive,
                     [] { return std::make_shared<km::GeometricAverage>(); }};
  IgniteCase one_d{"geometric_1d", "GeometricAverage", "{}", rows,
                   [] { return std::make_shared<km::GeometricAverage>(); }};
  IgniteCase average{"average_vectors", "Average", "{}", positive, [] { return std::make_shared<km::Average>(); }};
  for (IgniteCase* c : {&vectors, &one_d, &average}) c->inputs = "y_pred";
  return {vectors, one_d, average};
}

TEST(InformationTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(information_cases()); }

TEST(KernelDependenceTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(kernel_cases()); }

TEST(AccumulationTest, EqualIgnite055OnTheSameBatches) {
  kindling::testing::expect_ignite_values(accumulation_cases());
}

TEST(InformationTest, ValuesWorkedByHand) {
  // Equal logits: uniform over 4 classes, entropy log 4; the same distributions: KL = JS = 0.
  const at::Tensor uniform = at::zeros({3, 4}, at::kDouble);
  km::Entropy entropy;
  entropy.update(Value::tuple({uniform, at::zeros({3}, at::kLong)}));
  EXPECT_NEAR(entropy.compute().number(), std::log(4.0), 1e-12);
  km::KLDivergence kl;
  km::JSDivergence js;
  const at::Tensor same = at::tensor({1.0, 2.0, 3.0}).reshape({1, 3});
  kl.update(Value::tuple({same, same}));
  js.update(Value::tuple({same, same}));
  EXPECT_NEAR(kl.compute().number(), 0.0, 1e-12);
  EXPECT_NEAR(js.compute().number(), 0.0, 1e-12);
  // Target p = softmax(0, log 3) = (1/4, 3/4), prediction q uniform: KL = 1/4 log(1/2) + 3/4 log(3/2).
  km::KLDivergence kl2;
  kl2.update(Value::tuple({at::zeros({1, 2}, at::kDouble), at::tensor({0.0, std::log(3.0)}).reshape({1, 2})}));
  EXPECT_NEAR(kl2.compute().number(), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-12);
  // Confident and different predictions (one-hot in the limit) carry log 2 of information
  // about their input; identical ones carry none.
  km::MutualInformation mi;
  mi.update(Value(at::tensor({40.0, 0.0, 0.0, 40.0}).reshape({2, 2})));
  EXPECT_NEAR(mi.compute().number(), std::log(2.0), 1e-9);
  km::MutualInformation none;
  none.update(Value(at::tensor({1.0, 2.0, 1.0, 2.0}).reshape({2, 2})));
  EXPECT_NEAR(none.compute().number(), 0.0, 1e-12);
}

TEST(KernelDependenceTest, ValuesWorkedByHand) {
  // x rows equal, y rows equal, |x - y|^2 = 1: MMD^2 = 1 + 1 - 2 exp(-1/2).
  km::MaximumMeanDiscrepancy mmd;
  mmd.update(Value::tuple({at::zeros({2, 1}, at::kDouble), at::ones({2, 1}, at::kDouble)}));
  EXPECT_NEAR(mmd.compute().number(), std::sqrt(2 - 2 * std::exp(-0.5)), 1e-12);
  // Y a copy of X is as dependent as it gets; HSIC is then positive, and equal for X and Y swapped.
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor x = at::randn({8, 3}, gen).to(at::kDouble);
  km::HSIC forward, backward;
  forward.update(Value::tuple({x, x.flip(1)}));
  backward.update(Value::tuple({x.flip(1), x}));
  EXPECT_GT(forward.compute().number(), 0.01);
  EXPECT_NEAR(forward.compute().number(), backward.compute().number(), 1e-12);
}

// ignite 0.5.5's HSIC of 6 samples with one NaN or inf in x: nan (its clamp keeps NaN). MMD's
// NaN and inf: NonFiniteMetricsTest.
TEST(KernelDependenceTest, ANaNOrInfGivesNaNAsIgnite) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    at::Tensor x = at::arange(12, at::kDouble).reshape({6, 2}).sin();
    x[1][0] = bad;
    km::HSIC hsic;
    hsic.update(Value::tuple({x, at::arange(12, at::kDouble).reshape({6, 2}).cos()}));
    EXPECT_TRUE(std::isnan(hsic.compute().number())) << bad;
  }
}

TEST(AccumulationTest, ValuesWorkedByHand) {
  km::GeometricAverage g;
  g.update(Value(2.0));
  g.update(Value(at::tensor({8.0})));
  EXPECT_NEAR(g.compute().number(), 4.0, 1e-12);  // sqrt(2 * 8)
  // A maximum, combined over ranks by kMax: (accumulator, count).
  km::VariableAccumulation biggest(
      [](const at::Tensor& a, const at::Tensor& x) { return at::maximum(a, x.dim() > 1 ? std::get<0>(x.max(0)) : x); },
      {}, c10::Device(c10::kCPU), kindling::dist::ReduceOp::kMax);
  biggest.update(Value(at::tensor({1.0, 5.0, 3.0, 2.0}).reshape({2, 2})));
  biggest.update(Value(at::tensor({4.0, 0.0})));
  const Value v = biggest.compute();
  ASSERT_TRUE(v.is_tuple());
  EXPECT_TRUE(at::equal(v.tuple_elements()[0], at::tensor({4.0, 5.0}, at::kDouble)));
  EXPECT_EQ(v.tuple_elements()[1].item<int64_t>(), 3);
}

TEST(InformationTest, MisuseIsRefusedWithWhatWasGiven) {
  km::Entropy entropy;
  EXPECT_NE(error_of<km::NotComputableError>([&] { entropy.compute(); }).find("Entropy must have at least one example"),
            std::string::npos);
  EXPECT_NE(error_of([&] { entropy.update(Value(at::ones({4}))); })
                .find("Entropy: y_pred must be logits of shape (N, C) or (N, C, ...), classes in dimension 1, but "
                      "given [4]"),
            std::string::npos);
  km::KLDivergence kl;
  EXPECT_NE(error_of([&] {
              kl.update(Value::tuple({at::ones({2, 3}), at::ones({2, 4})}));
            }).find("KLDivergence: y_pred and y must be logits of the same shape, but given [2, 3] and [2, 4]"),
            std::string::npos);
  km::JSDivergence js;
  EXPECT_NE(error_of([&] {
              js.update(Value::tuple({at::ones({2, 3}, at::kLong), at::ones({2, 3}, at::kLong)}));
            }).find("JSDivergence: y must be floating point logits, but given Long"),
            std::string::npos);
  km::MutualInformation mi;
  mi.update(Value(at::ones({2, 3})));
  EXPECT_NE(error_of([&] {
              mi.update(Value(at::ones({2, 4})));
            }).find("every batch must have the same number of classes; the earlier ones had 3, this one has 4"),
            std::string::npos);
  EXPECT_NEAR(mi.compute().number(), 0.0, 1e-12);  // the refused batch stored nothing
}

TEST(KernelDependenceTest, MisuseIsRefusedWithWhatWasGiven) {
  km::HSIC strict(-1, -1, /*ignore_invalid_batch=*/false);
  EXPECT_NE(error_of([&] {
              strict.update(Value::tuple({at::ones({3, 2}), at::ones({3, 2})}));
            }).find("HSIC: a batch must hold at least 4 samples, got 3"),
            std::string::npos);
  EXPECT_NE(error_of<km::NotComputableError>([&] { strict.compute(); }).find("HSIC must have at least one batch"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              strict.update(Value::tuple({at::ones({5, 2}), at::ones({4, 2})}));
            }).find("HSIC: the two inputs must hold the same number of samples, but given [5, 2] and [4, 2]"),
            std::string::npos);
  km::MaximumMeanDiscrepancy mmd;
  EXPECT_NE(error_of([&] {
              mmd.update(Value::tuple({at::ones({5, 2}), at::ones({5, 3})}));
            }).find("x and y must have the same shape, but given [5, 2] and [5, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              mmd.update(Value::tuple({at::ones({5}), at::ones({5})}));
            }).find("the two inputs must have shape (B, ...), a sample per row, but given [5] and [5]"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { km::MaximumMeanDiscrepancy bad(0.0); }).find("var (the kernel's bandwidth) must be a positive"),
      std::string::npos);
}

TEST(AccumulationTest, MisuseIsRefusedWithWhatWasGiven) {
  EXPECT_NE(error_of([] {
              km::VariableAccumulation empty(km::VariableAccumulation::Op{});
            }).find("the op must be a callable (accumulator, output) -> accumulator, but it is empty"),
            std::string::npos);
  km::GeometricAverage g;
  EXPECT_NE(
      error_of<km::NotComputableError>([&] { g.compute(); }).find("GeometricAverage must have at least one example"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              g.update(Value::tuple({at::ones({2}), at::ones({2})}));
            }).find("GeometricAverage: the (transformed) engine output should be a number or a tensor"),
            std::string::npos);
}

// 1-D outputs of different lengths: the metric is named with both shapes, without LibTorch's
// stack trace (ignite raises LibTorch's "The size of tensor a (3) must match ..."); nothing stored.
TEST(AccumulationTest, OutputsThatDoNotCombineAreRefusedByName) {
  km::Average average;
  km::GeometricAverage geometric;
  for (km::VariableAccumulation* m : std::vector<km::VariableAccumulation*>{&average, &geometric}) {
    m->update(Value(at::ones({3}, at::kDouble)));
    const std::string error = error_of<kindling::UsageError>([&] { m->update(Value(at::ones({5}, at::kDouble))); });
    EXPECT_NE(error.find(m->name() + ": this output, of shape [5], does not combine with the accumulator of the "
                                     "earlier ones, of shape [3]"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("The size of tensor a (3) must match the size of tensor b (5)"), std::string::npos) << error;
    EXPECT_EQ(error.find("Exception raised from"), std::string::npos) << error;  // no stack trace
    EXPECT_TRUE(at::equal(m->compute().tensor(), at::ones({3}, at::kDouble))) << m->name();
  }
}

}  // namespace information_test
