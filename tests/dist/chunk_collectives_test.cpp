// reduce_scatter and all_gather_into (kindling/dist/dist.h), blocking and asynchronous, on every
// CPU backend at world sizes 1, 2 and 3, on the world and on a group of a subset of ranks; wrong
// sizes and dtypes refused on every rank; a member late by more than the stall monitor's 1 s
// waits; the serial model's copies. (Ranks whose chunks differ:
// the fingerprints refuse them, tests/dist/failure_test.cpp.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <kindling/kindling.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/errors.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace chunk_collectives_test {

std::vector<int> subset_for(int ws) {
  if (ws == 1) return {0};
  if (ws == 2) return {1};
  return {0, 2};
}

// What global rank `r` puts in chunk `q` of its input: distinct for every rank, chunk, element.
at::Tensor chunk_of(int r, int q, int64_t n) { return at::arange(n, at::kDouble) + 100.0 * (r + 1) + 10.0 * q; }

// The message of the kindling::UsageError `fn` throws.
template <typename F>
std::string usage_error(F&& fn) {
  return kindling::testing::error_of<kindling::UsageError>(std::forward<F>(fn));
}

void reduce_scatters(const kd::Group& g, const std::vector<int>& m, bool member, int gi) {
  const int r = kd::get_rank();
  const int n = static_cast<int>(m.size());
  const int64_t len = 5;
  std::vector<at::Tensor> mine;
  for (int q = 0; q < n; ++q) mine.push_back(chunk_of(r, q, len));
  at::Tensor input = at::cat(mine);
  at::Tensor want = at::zeros({len}, at::kDouble), most = at::full({len}, -1e9, at::kDouble);
  for (int x : m) {
    want += chunk_of(x, std::max(gi, 0), len);
    most = at::maximum(most, chunk_of(x, std::max(gi, 0), len));
  }
  auto out = at::full({len}, -7.0, at::kDouble);
  auto same = kd::reduce_scatter(out, input, kd::ReduceOp::kSum, g);
  WCHECK(same.is_same(out), << "reduce_scatter returns its output");
  WCHECK(at::equal(out, member ? want : at::full({len}, -7.0, at::kDouble)), << out << " expected " << want);
  // Stacked (size, len) input, MAX, float32 written back into a non-contiguous output.
  auto base = at::zeros({len, 2}, at::kFloat);
  kd::reduce_scatter(base.select(1, 1), input.view({n, len}).to(at::kFloat), kd::ReduceOp::kMax, g);
  if (member) WCHECK(at::equal(base.select(1, 1), most.to(at::kFloat)), << base);
  // In place: the output is this rank's own chunk of the input.
  at::Tensor in_place = input.clone();
  at::Tensor own = in_place.narrow(0, std::max(gi, 0) * len, len);
  kd::reduce_scatter(own, in_place, kd::ReduceOp::kSum, g);
  if (member) WCHECK(at::equal(own, want), << own);
}

void all_gathers(const kd::Group& g, const std::vector<int>& m, bool member) {
  const int r = kd::get_rank();
  const int n = static_cast<int>(m.size());
  auto input = at::full({2, 3}, static_cast<float>(r), at::kFloat);
  auto out = at::full({n * 2, 3}, -1.0f);
  auto same = kd::all_gather_into(out, input, g);
  WCHECK(same.is_same(out), << "all_gather_into returns its output");
  for (int i = 0; i < n; ++i) {
    const float v = member ? static_cast<float>(m[i]) : -1.0f;
    WCHECK(at::equal(out.narrow(0, 2 * i, 2), at::full({2, 3}, v)), << out);
  }
  auto stacked = at::zeros({n, 2, 3}, at::kFloat);  // (size, ...) works as well
  kd::all_gather_into(stacked, input, g);
  if (member) WCHECK(at::equal(stacked.view({n * 2, 3}), out), << stacked);
}

// Several in flight at once, waited in the reverse order of their start.
void in_flight(const kd::Group& g, const std::vector<int>& m, bool member) {
  const int r = kd::get_rank();
  const int n = static_cast<int>(m.size());
  std::vector<at::Tensor> outs, gathered, inputs;  // alive until the waits
  std::vector<kd::Work> works;
  for (int k = 0; k < 3; ++k) {
    outs.push_back(at::full({4}, -3.0));
    inputs.push_back(at::full({4 * n}, static_cast<double>(r + k)));
    works.push_back(kd::reduce_scatter_async(outs.back(), inputs.back(), kd::ReduceOp::kSum, g));
    gathered.push_back(at::full({n}, -3, at::kLong));
    inputs.push_back(at::full({1}, static_cast<int64_t>(10 * r + k)));
    works.push_back(kd::all_gather_into_async(gathered.back(), inputs.back(), g));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
  for (int k = 0; k < 3; ++k) {
    double sum = 0;
    for (int x : m) sum += x + k;
    WCHECK(at::equal(outs[k], at::full({4}, member ? sum : -3.0)), << outs[k]);
    for (int i = 0; i < n; ++i) WCHECK(gathered[k][i].item<int64_t>() == (member ? 10 * m[i] + k : -3), << gathered[k]);
  }
}

// Sizes or dtypes that do not fit: refused on every rank before anything is sent; the group
// stays usable.
void refusals(const kd::Group& g, int n) {
  const std::string wrong =
      usage_error([&] { kd::reduce_scatter(at::zeros({4}), at::zeros({4 * n + 1}), kd::ReduceOp::kSum, g); });
  WCHECK(wrong.find("kindling::dist::reduce_scatter: the input has " + std::to_string(4 * n + 1) + " elements") !=
                 std::string::npos &&
             wrong.find(std::to_string(n) + " x 4 = " + std::to_string(4 * n)) != std::string::npos,
         << wrong);
  const std::string gather = usage_error([&] { kd::all_gather_into_async(at::zeros({3 * n + 2}), at::zeros({3}), g); });
  WCHECK(gather.find("kindling::dist::all_gather_into_async: the output has " + std::to_string(3 * n + 2)) !=
             std::string::npos,
         << gather);
  const std::string dtype = usage_error([&] { kd::all_gather_into(at::zeros({n}, at::kLong), at::zeros({1}), g); });
  WCHECK(dtype.find("the output is Long but the input is Float") != std::string::npos, << dtype);
  const std::string bitwise =
      usage_error([&] { kd::reduce_scatter(at::zeros({1}), at::zeros({n}), kd::ReduceOp::kAnd, g); });
  WCHECK(bitwise.find("bitwise reduction") != std::string::npos, << bitwise);
  kd::barrier(g);
}

// A member 1.5 s late (under the default stall period, with the stall monitor waiting in 1 s
// slices): the others wait for it and every result is right.
void late_member(int ws) {
  if (ws < 2) return;
  const int r = kd::get_rank();
  if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto out = at::zeros({3});
  kd::reduce_scatter(out, at::full({3 * ws}, static_cast<float>(r)));
  auto all = at::zeros({ws});
  kd::all_gather_into(all, at::full({1}, static_cast<float>(r)));
  if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto again = at::zeros({3});
  kd::reduce_scatter_async(again, at::full({3 * ws}, 1.0f)).wait();
  WCHECK(at::equal(out, at::full({3}, ws * (ws - 1) / 2.0f)) && at::equal(all, at::arange(ws, at::kFloat)) &&
             at::equal(again, at::full({3}, static_cast<float>(ws))),
         << out << all << again);
}

void exercise(const kd::Group& g, const std::vector<int>& m) {
  const int r = kd::get_rank();
  const auto found = std::find(m.begin(), m.end(), r);
  const bool member = found != m.end();
  const int gi = member ? static_cast<int>(found - m.begin()) : -1;
  reduce_scatters(g, m, member, gi);
  all_gathers(g, m, member);
  in_flight(g, m, member);
  if (member) refusals(g, static_cast<int>(m.size()));
}

}  // namespace chunk_collectives_test

KINDLING_WORKER(chunk_collectives) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int ws = kd::get_world_size();
  std::vector<int> all(static_cast<std::size_t>(ws));
  std::iota(all.begin(), all.end(), 0);
  chunk_collectives_test::exercise(kd::world(), all);
  chunk_collectives_test::late_member(ws);
  auto subset = chunk_collectives_test::subset_for(ws);
  chunk_collectives_test::exercise(kd::new_group(subset), subset);
  kd::finalize();
}

namespace chunk_collectives_test {

class ChunkCollectivesTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ChunkCollectivesTest, ReduceScatterAndAllGatherIntoOnWorldAndSubsetGroup) {
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  opts.deadline = std::chrono::seconds(120);
  auto results = run_workers("chunk_collectives", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

INSTANTIATE_TEST_SUITE_P(Backends, ChunkCollectivesTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({1, 2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

}  // namespace chunk_collectives_test

namespace chunk_collectives_test {

TEST(ChunkCollectivesSerial, CopyTheInput) {
  auto out = at::zeros({2, 3});
  auto in = at::arange(6, at::kFloat);
  EXPECT_TRUE(kd::reduce_scatter(out, in).is_same(out));
  EXPECT_TRUE(at::equal(out.view({-1}), in));
  auto gathered = at::zeros({6});
  kd::all_gather_into_async(gathered, in.view({2, 3}) * 2).wait();
  EXPECT_TRUE(at::equal(gathered, in * 2));
  EXPECT_THROW(kd::all_gather_into(at::zeros({5}), in), kindling::UsageError);
}

}  // namespace chunk_collectives_test
