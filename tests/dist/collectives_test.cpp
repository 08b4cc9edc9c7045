// Every collective on the gloo backend at world sizes 1, 2 and 3, on the world and on a
// group of a subset of ranks, with real processes on 127.0.0.1.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <kindling/kindling.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <thread>

#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

bool same_values(const at::Tensor& a, const at::Tensor& b) { return a.sizes() == b.sizes() && at::equal(a, b); }

std::vector<int> subset_for(int ws) {
  if (ws == 1) return {0};
  if (ws == 2) return {1};
  return {0, 2};
}

std::string utf8_text(int r) {
  std::string s = "rank " + std::to_string(r) + ": ";
  for (int i = 0; i < 500 * r; ++i) s += "\xC3\xA9";  // "é", two bytes each: byte length != char count
  return s;
}

// Runs every collective on `g` whose members are `m` (global ranks).
void exercise(const kd::Group& g, const std::vector<int>& m) {
  const int r = kd::get_rank();
  const int n = static_cast<int>(m.size());
  const bool member = std::find(m.begin(), m.end(), r) != m.end();
  const int gi = member ? static_cast<int>(std::find(m.begin(), m.end(), r) - m.begin()) : -1;
  WCHECK(g.rank() == gi, << "group rank " << g.rank() << " expected " << gi);
  WCHECK(g.size() == n);

  // all_reduce on tensors, every op.
  auto value = [&](int rank) { return static_cast<double>(rank + 1); };
  double sum = 0, prod = 1, mn = 1e9, mx = -1e9;
  int64_t band = -1, bor = 0;
  for (int x : m) {
    sum += value(x);
    prod *= value(x);
    mn = std::min(mn, value(x));
    mx = std::max(mx, value(x));
    band &= (x + 1) | 8;
    bor |= (x + 1) | 8;
  }
  auto t = at::full({3}, value(r), at::kDouble);
  auto same = kd::all_reduce(t, kd::ReduceOp::kSum, g);
  WCHECK(same.is_same(t), << "all_reduce must work in place");
  WCHECK(same_values(t, at::full({3}, member ? sum : value(r), at::kDouble)), << t);
  WCHECK(same_values(kd::all_reduce(at::full({2}, value(r)), kd::ReduceOp::kProduct, g),
                     at::full({2}, member ? prod : value(r))));
  WCHECK(same_values(kd::all_reduce(at::full({2}, value(r)), kd::ReduceOp::kMin, g),
                     at::full({2}, member ? mn : value(r))));
  WCHECK(same_values(kd::all_reduce(at::full({2}, value(r)), kd::ReduceOp::kMax, g),
                     at::full({2}, member ? mx : value(r))));
  auto it = at::full({2}, (r + 1) | 8, at::kLong);
  WCHECK(same_values(kd::all_reduce(it.clone(), kd::ReduceOp::kAnd, g),
                     at::full({2}, member ? band : (r + 1) | 8, at::kLong)));
  WCHECK(same_values(kd::all_reduce(it.clone(), kd::ReduceOp::kOr, g),
                     at::full({2}, member ? bor : (r + 1) | 8, at::kLong)));
  auto flags = at::tensor(std::vector<uint8_t>{1, static_cast<uint8_t>(r == m.front() ? 0 : 1)}).to(at::kBool);
  auto anded = kd::all_reduce(flags.clone(), kd::ReduceOp::kAnd, g);
  WCHECK(anded.scalar_type() == at::kBool && anded[0].item<bool>() && anded[1].item<bool>() == !member, << anded);
  // Non-contiguous input: reduced and written back into the caller's view.
  auto base = at::full({4, 4}, value(r));
  auto column = base.select(1, 2);
  kd::all_reduce(column, kd::ReduceOp::kSum, g);
  WCHECK(same_values(base.select(1, 2), at::full({4}, member ? sum : value(r))));
  WCHECK(same_values(base.select(1, 0), at::full({4}, value(r))), << "other columns must be untouched");

  // Numbers: integers stay integers, doubles keep their precision.
  const int64_t isum = kd::all_reduce(static_cast<int64_t>(r + 1), kd::ReduceOp::kSum, g);
  WCHECK(isum == (member ? static_cast<int64_t>(sum) : r + 1));
  const double dsum = kd::all_reduce(0.25 * (r + 1), kd::ReduceOp::kSum, g);
  WCHECK(dsum == (member ? 0.25 * sum : 0.25 * (r + 1)));
  WCHECK(kd::all_reduce(r + 1, kd::ReduceOp::kMax, g) == (member ? static_cast<int>(mx) : r + 1));

  // all_gather of equally shaped tensors: concatenated along dim 0 in group order.
  auto gathered = kd::all_gather(at::full({2, 3}, static_cast<float>(r)), g);
  if (member) {
    WCHECK(gathered.sizes() == at::IntArrayRef({2 * n, 3}), << gathered.sizes());
    for (int i = 0; i < n; ++i)
      WCHECK(same_values(gathered.narrow(0, 2 * i, 2), at::full({2, 3}, static_cast<float>(m[i]))));
    auto scalars = kd::all_gather(at::scalar_tensor(r, at::kLong), g);
    WCHECK(scalars.sizes() == at::IntArrayRef({n}));
    for (int i = 0; i < n; ++i) WCHECK(scalars[i].item<int64_t>() == m[i]);
  } else {
    WCHECK(same_values(gathered, at::full({2, 3}, static_cast<float>(r))), << "non-members get their input back");
  }

  // Different shapes, known and unknown.
  std::vector<std::vector<int64_t>> shapes;
  for (int x : m) shapes.push_back({x + 1, 2});
  auto mine = at::full({r + 1, 2}, static_cast<int>(r), at::kInt);
  auto parts = kd::all_gather_tensors_with_shapes(mine, shapes, g);
  WCHECK(static_cast<int>(parts.size()) == (member ? n : 1));
  for (std::size_t i = 0; member && i < parts.size(); ++i)
    WCHECK(same_values(parts[i], at::full({m[i] + 1, 2}, m[i], at::kInt)), << parts[i]);
  auto ragged = r % 2 == 0 ? at::arange(r + 2, at::kFloat) : at::arange(2 * (r + 1), at::kFloat).view({2, r + 1});
  auto rparts = kd::all_gather_tensors(ragged, g);
  for (std::size_t i = 0; member && i < rparts.size(); ++i) {
    const int x = m[i];
    auto expect = x % 2 == 0 ? at::arange(x + 2, at::kFloat) : at::arange(2 * (x + 1), at::kFloat).view({2, x + 1});
    WCHECK(same_values(rparts[i], expect), << rparts[i]);
  }

  // Numbers, strings (different byte lengths, UTF-8) and serializable values.
  auto nums = kd::all_gather(static_cast<int64_t>(r * 10), g);
  auto texts = kd::all_gather(utf8_text(r), g);
  std::map<std::string, at::Tensor> obj{{"w", at::full({2}, static_cast<double>(r))}, {"id", at::scalar_tensor(r)}};
  auto objs = kd::all_gather_object(obj, g);
  std::vector<std::map<std::string, double>> nested{{{"lr", 0.1 * r}}, {{"loss", r + 0.5}}};
  auto nesteds = kd::all_gather_object(nested, g);
  WCHECK(static_cast<int>(nums.size()) == (member ? n : 1));
  for (std::size_t i = 0; member && i < nums.size(); ++i) {
    WCHECK(nums[i] == m[i] * 10);
    WCHECK(texts[i] == utf8_text(m[i]), << "string " << i << " differs");
    WCHECK(same_values(objs[i].at("w"), at::full({2}, static_cast<double>(m[i]))));
    WCHECK(nesteds[i][1].at("loss") == m[i] + 0.5);
  }

  // broadcast: tensors in place, safe mode, numbers (exact), strings.
  const int src = m.back();
  auto b = at::full({2, 2}, static_cast<float>(r));
  kd::broadcast(b, src, g);
  WCHECK(same_values(b, at::full({2, 2}, static_cast<float>(member ? src : r))));
  std::optional<at::Tensor> maybe;
  if (r == m.front()) maybe = at::arange(6, at::kLong).view({2, 3});
  auto safe = kd::broadcast(maybe, m.front(), g);
  if (member) WCHECK(same_values(safe, at::arange(6, at::kLong).view({2, 3})), << safe);
  const int64_t big = 1234567890123LL + r;  // not representable in float32
  WCHECK(kd::broadcast(big, src, g) == (member ? 1234567890123LL + src : big));
  WCHECK(kd::broadcast(utf8_text(r), src, g) == utf8_text(member ? src : r));
  std::optional<std::string> maybe_text;
  if (r == src) maybe_text = "from the source";
  auto got_text = kd::broadcast(maybe_text, src, g);
  if (member) WCHECK(got_text == "from the source");
  if (!member && r != src) WCHECK(got_text.empty(), << "a non-member without a value gets std::string{}");
  auto vec = kd::broadcast_object(std::vector<int>{r, r}, src, g);
  if (member) WCHECK(vec == std::vector<int>({src, src}));

  kd::barrier(g);

  // reduce, scatter, gather, all_to_all.
  auto red = at::full({3}, value(r));
  kd::reduce(red, src, kd::ReduceOp::kSum, g);
  if (r == src) WCHECK(same_values(red, at::full({3}, sum)));
  std::vector<at::Tensor> chunks;
  if (r == m.front())
    for (int i = 0; i < n; ++i) chunks.push_back(at::full({2}, 10.0f * i));
  auto out = at::zeros({2});
  kd::scatter(out, chunks, m.front(), g);
  if (member) WCHECK(same_values(out, at::full({2}, 10.0f * gi)), << out);
  auto gathered_list = kd::gather(at::full({2}, static_cast<float>(r)), m.front(), g);
  if (r == m.front()) {
    WCHECK(static_cast<int>(gathered_list.size()) == n);
    for (int i = 0; i < n; ++i) WCHECK(same_values(gathered_list[i], at::full({2}, static_cast<float>(m[i]))));
  } else if (member) {
    WCHECK(gathered_list.empty());
  }
  std::vector<at::Tensor> a2a;
  for (int j = 0; j < n; ++j) a2a.push_back(at::full({j + 1}, 100.0f * r + j));
  auto a2a_out = kd::all_to_all(a2a, g);
  for (int k = 0; member && k < n; ++k)
    WCHECK(same_values(a2a_out[k], at::full({gi + 1}, 100.0f * m[k] + gi)), << a2a_out[k]);

  // Point-to-point: a ring with blocking calls, then with isend / irecv, then any-source.
  if (member && n >= 2) {
    const int next = m[(gi + 1) % n], prev = m[(gi + n - 1) % n];
    auto send_t = at::full({4}, static_cast<float>(r));
    auto recv_t = at::zeros({4});
    if (gi % 2 == 0) {
      kd::send(send_t, next, 1, g);
      WCHECK(kd::recv(recv_t, prev, 1, g) == prev);
    } else {
      WCHECK(kd::recv(recv_t, prev, 1, g) == prev);
      kd::send(send_t, next, 1, g);
    }
    WCHECK(same_values(recv_t, at::full({4}, static_cast<float>(prev))));
    auto recv2 = at::zeros({4});
    kd::Work rw = kd::irecv(recv2, prev, 2, g);
    kd::Work sw = kd::isend(send_t, next, 2, g);
    sw.wait();
    rw.wait();
    WCHECK(rw.is_completed() && same_values(recv2, at::full({4}, static_cast<float>(prev))));
    if (gi == 0) {
      std::vector<int> seen;
      for (int k = 1; k < n; ++k) {
        auto any = at::zeros({1});
        const int from = kd::recv(any, -1, 3, g);
        WCHECK(any.item<float>() == static_cast<float>(from), << "payload names the sender");
        seen.push_back(from);
      }
      std::sort(seen.begin(), seen.end());
      WCHECK(seen == std::vector<int>(m.begin() + 1, m.end()));
    } else {
      kd::send(at::full({1}, static_cast<float>(r)), m[0], 3, g);
    }
  }
}

}  // namespace

KINDLING_WORKER(all_collectives) {
  const std::string backend = kindling::testing::test_backend();
  kd::initialize(backend, kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int ws = kd::get_world_size();
  WCHECK(kd::backend() == backend && kd::model_name() == "native-dist");
  WCHECK(kd::get_rank() == std::atoi(std::getenv("RANK")));
  WCHECK(kd::get_local_rank() == kd::get_rank() && kd::get_nproc_per_node() == ws);
  WCHECK(kd::get_nnodes() == 1 && kd::get_node_rank() == 0);
  WCHECK(kd::device().is_cpu());
  std::vector<int> all(static_cast<std::size_t>(ws));
  std::iota(all.begin(), all.end(), 0);
  exercise(kd::world(), all);
  auto subset = subset_for(ws);
  exercise(kd::new_group(subset), subset);

  // Helpers.
  auto only = kd::one_rank_only([&] { return kd::get_rank() * 7 + 1; }, ws - 1, /*with_barrier=*/true);
  auto res = only();
  WCHECK(res.has_value() == (kd::get_rank() == ws - 1));
  if (res) WCHECK(*res == (ws - 1) * 7 + 1);
  const std::string marker = std::string(std::getenv("KINDLING_TEST_DIR")) + "/first";
  {
    kd::OneRankFirst guard(0);
    if (kd::get_rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::ofstream(marker) << "ready";
    } else {
      WCHECK(std::ifstream(marker).good(), << "rank 0 must have finished its scope first");
    }
  }
  kd::finalize();
  WCHECK(kd::get_world_size() == 1 && kd::backend() == "serial");
}

// Parameters: backend and world size. Every backend the build has runs the same checks;
// mpi ranks are started by a real mpirun.
class CollectivesTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CollectivesTest, EveryCollectiveOnWorldAndSubsetGroup) {
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  opts.deadline = std::chrono::seconds(120);
  auto results = run_workers("all_collectives", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectivesTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({1, 2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });
