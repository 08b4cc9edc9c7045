// all_reduce on tensors large enough for the mpi backend's shared-memory path (and several
// of its 4 MiB segments), every dtype and op it has kernels for, on ordinary tensors, on
// kindling::dist::empty_comm_buffer memory and on a mix of both, on the world and on a
// subset group; results checked against the rank-order fold computed locally. The same
// checks run on gloo. The mpi-only tests cover its errors (mismatched sizes, a rank that
// never arrives) and where empty_comm_buffer's memory lies.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <kindling/kindling.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

// Rank q's input: small whole numbers (1..5, or 0/1 for bool), so that every summation
// order gives the same floats and products of three ranks fit in int8.
at::Tensor input_of(int q, int64_t numel, at::ScalarType dtype) {
  auto i = at::arange(numel, at::kLong);
  if (dtype == at::kBool) return (i + q).remainder(3).ne(0);
  return (i * 7 + q * 13).remainder(5).add(1).to(dtype);
}

at::Tensor fold(const at::Tensor& a, const at::Tensor& b, kd::ReduceOp op) {
  switch (op) {
    case kd::ReduceOp::kSum: return a.scalar_type() == at::kBool ? a.logical_or(b) : a.add(b);
    case kd::ReduceOp::kProduct: return a.scalar_type() == at::kBool ? a.logical_and(b) : a.mul(b);
    case kd::ReduceOp::kMin: return at::minimum(a, b);
    case kd::ReduceOp::kMax: return at::maximum(a, b);
    case kd::ReduceOp::kAnd: return a.bitwise_and(b);
    case kd::ReduceOp::kOr: return a.bitwise_or(b);
  }
  return a;
}

std::vector<kd::ReduceOp> ops_for(at::ScalarType dtype) {
  using R = kd::ReduceOp;
  if (dtype == at::kBool) return {R::kMin, R::kMax, R::kAnd, R::kOr};
  if (at::isFloatingType(dtype)) return {R::kSum, R::kProduct, R::kMin, R::kMax};
  return {R::kSum, R::kProduct, R::kMin, R::kMax, R::kAnd, R::kOr};
}

// `mode`: "tensor" (at::empty), "buffer" (empty_comm_buffer), "mixed" (group rank 0 a
// buffer, the others ordinary tensors).
at::Tensor make(const std::string& mode, int group_rank, int64_t numel, at::ScalarType dtype, const kd::Group& g) {
  const bool buffer = mode == "buffer" || (mode == "mixed" && group_rank == 0);
  return buffer ? kd::empty_comm_buffer({numel}, at::TensorOptions().dtype(dtype), g) : at::empty({numel}, dtype);
}

void check_all(const kd::Group& g, const std::vector<int>& members, bool big) {
  const int r = kd::get_rank();
  const int gi = g.rank();
  const std::vector<at::ScalarType> types{at::kFloat, at::kDouble, at::kLong, at::kInt,
                                          at::kShort, at::kChar,   at::kByte, at::kBool};
  for (auto dtype : types) {
    const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
    // Below the shared-memory threshold (8 KiB), just above it with an odd count, and over
    // one 4 MiB segment (two dtypes, on the world only, to keep the test short).
    std::vector<int64_t> sizes{1000, (40 << 10) / elem + 3};
    if (big && (dtype == at::kFloat || dtype == at::kChar)) sizes.push_back((4 << 20) / elem + 1029);
    for (int64_t numel : sizes) {
      const at::Tensor mine = input_of(r, numel, dtype);
      std::vector<at::Tensor> inputs;
      for (int q : members) inputs.push_back(input_of(q, numel, dtype));
      for (auto op : ops_for(dtype)) {
        at::Tensor expected = inputs.front();
        for (std::size_t k = 1; k < inputs.size(); ++k) expected = fold(expected, inputs[k], op);
        if (gi < 0) expected = mine;  // non-members keep their input
        for (const std::string mode : {"tensor", "buffer", "mixed"}) {
          at::Tensor t = make(mode, gi, numel, dtype, g);
          t.copy_(mine);
          at::Tensor out = kd::all_reduce(t, op, g);
          WCHECK(out.is_same(t), << "in place");
          WCHECK(at::equal(t, expected), << mode << " " << c10::toString(dtype) << " " << kd::to_string(op) << " numel "
                                         << numel << ": " << (t != expected).sum().item<int64_t>()
                                         << " wrong elements");
        }
      }
    }
  }
  // Random floats: every member gets bit-identical results (each block is reduced once),
  // close to the sum in double precision.
  if (gi >= 0) {
    const int64_t numel = (6 << 20) / 4 + 17;
    at::Tensor t = kd::empty_comm_buffer({numel}, at::kFloat, g);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1234 + r);
    t.copy_(at::randn({numel}, gen));
    at::Tensor exact = at::zeros({numel}, at::kDouble);
    for (int q : members)
      exact += at::randn({numel}, at::make_generator<at::CPUGeneratorImpl>(1234 + q)).to(at::kDouble);
    kd::all_reduce(t, kd::ReduceOp::kSum, g);
    WCHECK(at::allclose(t.to(at::kDouble), exact, 1e-5, 1e-5));
    at::Tensor rows = kd::all_gather(t.unsqueeze(0), g);
    for (int64_t k = 1; k < rows.size(0); ++k) WCHECK(at::equal(rows[k], rows[0]), << "member " << k << " differs");
  }
}

}  // namespace

KINDLING_WORKER(large_all_reduce) {
  kd::initialize(kindling::testing::test_backend());
  const int n = kd::get_world_size();
  std::vector<int> everyone(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) everyone[static_cast<std::size_t>(i)] = i;
  check_all(kd::world(), everyone, true);
  const std::vector<int> subset = n == 2 ? std::vector<int>{1} : std::vector<int>{0, 2};
  check_all(kd::new_group(subset), subset, false);
  kd::finalize();
}

class LargeAllReduceTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(LargeAllReduceTest, EveryDtypeOpAndMemoryKindMatchesTheRankOrderFold) {
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  opts.deadline = std::chrono::seconds(240);
  auto results = run_workers("large_all_reduce", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

INSTANTIATE_TEST_SUITE_P(Backends, LargeAllReduceTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

// Every dtype LibTorch has moves through broadcast, all_gather, all_to_all and send/recv,
// including those Gloo has no kernels for (int16, bfloat16, bool, complex: moved as bytes
// of the same size); on gloo int16 and bfloat16 also reduce (int16 in a wider type; bfloat16
// as itself where LibTorch's gloo sums it (2.15), widened to float32 where not (1.13)).
KINDLING_WORKER(every_dtype_moves) {
  kd::initialize(kindling::testing::test_backend());
  const int r = kd::get_rank(), n = kd::get_world_size();
  const bool gloo = kd::backend() == "gloo";
  auto value = [](int q, at::ScalarType dt) {
    auto a = at::arange(6, at::kLong).add(q * 10);
    return dt == at::kBool ? a.remainder(q + 2).eq(0) : a.to(dt);
  };
  for (auto dt : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kChar, at::kByte, at::kShort, at::kInt,
                  at::kLong, at::kBool, at::kComplexFloat, at::kComplexDouble}) {
    const std::string name = c10::toString(dt);
    at::Tensor b = value(r, dt);
    kd::broadcast(b, n - 1);
    WCHECK(at::equal(b, value(n - 1, dt)), << "broadcast " << name << ": " << b);
    at::Tensor all = kd::all_gather(value(r, dt));
    for (int q = 0; q < n; ++q)
      WCHECK(at::equal(all.slice(0, 6 * q, 6 * q + 6), value(q, dt)), << "all_gather " << name);
    std::vector<at::Tensor> parts;
    for (int q = 0; q < n; ++q) parts.push_back(value(r, dt).slice(0, q, q + 1));  // element q goes to rank q
    auto got = kd::all_to_all(parts);
    for (int q = 0; q < n; ++q) WCHECK(at::equal(got[q], value(q, dt).slice(0, r, r + 1)), << "all_to_all " << name);
    if (r == 0) kd::send(value(0, dt), 1, 7);
    if (r == 1) {
      at::Tensor in = at::zeros({6}, dt);
      kd::recv(in, 0, 7);
      WCHECK(at::equal(in, value(0, dt)), << "recv " << name);
    }
    if (gloo && (dt == at::kShort || dt == at::kBFloat16)) {
      at::Tensor expected = value(0, dt);
      for (int q = 1; q < n; ++q) expected = expected.add(value(q, dt));
      at::Tensor t = value(r, dt);
      kd::all_reduce(t);
      WCHECK(at::equal(t, expected), << "all_reduce " << name << ": " << t);
      at::Tensor m = value(r, dt);
      kd::reduce(m, 0, kd::ReduceOp::kMax);
      if (r == 0) WCHECK(at::equal(m, value(n - 1, dt)), << "reduce max " << name << ": " << m);
    }
  }
  kd::finalize();
}

TEST_P(LargeAllReduceTest, EveryDtypeMovesAndGlooReducesInt16AndBFloat16) {
  LaunchOptions opts;
  opts.backend = std::get<0>(GetParam());
  opts.world_size = std::get<1>(GetParam());
  auto results = run_workers("every_dtype_moves", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

#if KINDLING_HAS_MPI
namespace {
// The file a virtual address of this process is mapped from ("" for anonymous memory).
std::string mapping_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode;
    std::getline(in >> std::ws, path);
    const auto dash = range.find('-');
    const auto lo = std::stoull(range.substr(0, dash), nullptr, 16),
               hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr >= lo && addr < hi) return path;
  }
  return "";
}
}  // namespace

// empty_comm_buffer memory lies in Open MPI's shared window (/dev/shm); a request larger
// than the heap (KINDLING_MPI_SHM_HEAP_MB) gets ordinary memory; freed blocks are reused.
KINDLING_WORKER(mpi_comm_buffer_memory) {
  kd::initialize("mpi");
  at::Tensor small = kd::empty_comm_buffer({256 << 10}, at::kByte);
  WCHECK(mapping_of(small.data_ptr()).find("/dev/shm/") == 0, << mapping_of(small.data_ptr()));
  at::Tensor big = kd::empty_comm_buffer({2 << 20}, at::kByte);  // the heap is 1 MiB here
  WCHECK(mapping_of(big.data_ptr()).find("/dev/shm/") == std::string::npos, << mapping_of(big.data_ptr()));
  WCHECK(at::equal(kd::all_reduce(big.fill_(1)), at::full({2 << 20}, 2, at::kByte)));
  void* first = small.data_ptr();
  small = at::Tensor();
  at::Tensor again = kd::empty_comm_buffer({512 << 10}, at::kByte);
  WCHECK(again.data_ptr() == first, << "a freed block is reused");
  WCHECK(at::equal(kd::all_reduce(again.fill_(3), kd::ReduceOp::kMax), at::full({512 << 10}, 3, at::kByte)));
  at::Tensor ordinary = kd::empty_comm_buffer({4}, at::kFloat, kd::new_group({0}));
  WCHECK(ordinary.numel() == 4);
  kd::finalize();
  WCHECK(kd::empty_comm_buffer({3}, at::kFloat).numel() == 3, << "serial model: an ordinary tensor");
}

TEST(MpiSharedMemory, CommBuffersLieInTheSharedWindowUntilItIsFull) {
  LaunchOptions opts;
  opts.backend = "mpi";
  opts.world_size = 2;
  opts.env["KINDLING_MPI_SHM_HEAP_MB"] = "1";
  auto results = run_workers("mpi_comm_buffer_memory", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

KINDLING_WORKER(mpi_shm_mismatch) {
  kd::initialize("mpi", kd::InitOptions().timeout(std::chrono::seconds(20)));
  const int r = kd::get_rank();
  std::string what;
  try {
    kd::all_reduce(at::ones({r == 0 ? 20000 : 30000}));
  } catch (const kindling::UsageError& e) {
    what = e.what();
  }
  WCHECK(what.find("group rank " + std::to_string(r) + " reduces " + (r == 0 ? "20000" : "30000") +
                   " elements of Float with SUM but group rank " + std::to_string(1 - r) +
                   " passed a different number of elements") != std::string::npos,
         << what);
  try {
    kd::all_reduce(at::ones({20000}));
    WCHECK(false, << "the path must refuse to run out of step");
  } catch (const kindling::CommunicationError& e) {
    WCHECK(std::string(e.what()).find("out of step") != std::string::npos, << e.what());
  }
  // Small tensors go through MPI itself, which still works.
  WCHECK(at::equal(kd::all_reduce(at::ones({4})), at::full({4}, 2.0f)));
  kd::finalize();
}

TEST(MpiSharedMemory, MismatchedSizesAreReportedOnEveryRank) {
  LaunchOptions opts;
  opts.backend = "mpi";
  opts.world_size = 2;
  auto results = run_workers("mpi_shm_mismatch", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// Unlike a blocking MPI call, the shared-memory path can give up: a rank that never
// arrives is a TimeoutError naming it, and the job can still finalize.
KINDLING_WORKER(mpi_shm_skipped) {
  kd::initialize("mpi", kd::InitOptions().timeout(std::chrono::seconds(2)));
  kd::barrier();
  if (kd::get_rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(4));  // past rank 0's 2 s timeout
  } else {
    const auto start = std::chrono::steady_clock::now();
    std::string what;
    try {
      kd::all_reduce(at::ones({1 << 20}));
    } catch (const kindling::TimeoutError& e) {
      what = e.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WCHECK(what.find("group rank 1 did not enter the same all_reduce within") != std::string::npos, << what);
    WCHECK(what.find("[rank 0/2] kindling::dist::all_reduce") != std::string::npos, << what);
    WCHECK(s < 7.0, << "the timeout is 2 s (+ slack), took " << s);
  }
  kd::finalize();
}

TEST(MpiSharedMemory, ARankThatNeverArrivesIsATimeoutError) {
  LaunchOptions opts;
  opts.backend = "mpi";
  opts.world_size = 2;
  opts.deadline = std::chrono::seconds(60);
  auto results = run_workers("mpi_shm_skipped", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}
#endif
