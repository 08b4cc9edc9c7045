// bench_collectives: all_reduce latency and bandwidth of kindling vs its raw engine,
// measured in the same run, in the style of nccl-tests: on gloo the peer is a raw c10d
// ProcessGroupGloo, on nccl (-B nccl) a raw c10d ProcessGroupNCCL, on mpi (-B mpi, under
// mpirun) a raw MPI_Allreduce. Tensors live on kindling::dist::device(): where CUDA is
// visible that is the GPU, so gloo then reduces CUDA tensors; both sides wait for each
// call to complete on the host (a Work::wait with a timeout). The mpi run also
// measures this machine's memcpy bandwidth at each size, the bound for shared memory.
// -m buffer makes both sides reduce kindling::dist::empty_comm_buffer memory (on mpi: the
// shared window, reduced in place) instead of ordinary tensors (-m tensor, the default).
//
//   export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600   (unset: 127.0.0.1 and 15000, initialize's defaults)
//   for r in 0 1; do RANK=$r ./bench_collectives -b 4 -e 64M -f 4 -n 200 -w 20 & done; wait
//   mpirun -np 2 ./bench_collectives -B mpi -b 4 -e 64M -f 4 -n 200 -w 20
//
// Each size runs `reps` rounds; a round times n kindling calls and n raw c10d calls back
// to back (alternating which goes first), so both see the same machine state. Reported
// times are the median over rounds of the per-call mean. busbw = algbw * 2(n-1)/n.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if KINDLING_BENCH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <kindling/kindling.h>

#include "cli/cli.h"

#if KINDLING_BENCH_MPI
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kd = kindling::dist;

namespace {

// The environment variable `name`, or `fallback` (kindling's own defaults) when unset.
std::string kindling_env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_calls(int n, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t begin = 4, end = 64 << 20;
  int factor = 4, iters = 100, warmup = 10, reps = 7;
  std::string backend = "gloo", memory = "tensor";
  // Short flags as nccl-tests spells them (-b -e -f -n -w), long ones as the other programs.
  CLI::App app{"all_reduce latency and bandwidth, kindling vs its raw engine in the same run", "bench_collectives"};
  app.add_option("-B,--backend", backend, "gloo, nccl or mpi (mpi under mpirun)")
      ->check(CLI::IsMember({"gloo", "nccl", "mpi"}))
      ->capture_default_str();
  app.add_option("-m,--memory", memory, "tensor (at::full) or buffer (kindling::dist::empty_comm_buffer)")
      ->check(CLI::IsMember({"tensor", "buffer"}))
      ->capture_default_str();
  app.add_option("-b,--begin", begin, "Smallest size in bytes (K, M, G suffixes are powers of 1024)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 34));
  app.add_option("-e,--end", end, "Largest size in bytes")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 34));
  app.add_option("-f,--factor", factor, "Size multiplier between rows")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  app.add_option("-n,--iters", iters, "Timed calls per round")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("-w,--warmup", warmup, "Untimed calls first")->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("-r,--reps", reps, "Rounds; the median is reported")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
#if !KINDLING_BENCH_MPI
  if (backend == "mpi") {
    std::fprintf(stderr, "bench_collectives: this build has no mpi backend (-DKINDLING_WITH_MPI=ON)\n");
    return 2;
  }
#endif
  kd::initialize(backend);
  const int rank = kd::get_rank(), ws = kd::get_world_size();
  const bool mpi = backend == "mpi";

  // The peer on gloo / nccl: a raw c10d engine on its own store (next port), same options.
  std::function<void(std::vector<at::Tensor>&)> raw_all_reduce;
  if (!mpi) {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(std::stoi(kindling_env("MASTER_PORT", "15000")) + 1);
    so.isServer = rank == 0;
    so.numWorkers = ws;
    so.waitWorkers = rank != 0;
    so.timeout = std::chrono::seconds(60);
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::TCPStore>(kindling_env("MASTER_ADDR", "127.0.0.1"), so);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("raw", store);
    const std::chrono::milliseconds wait_limit = std::chrono::seconds(60);
    if (backend == "gloo") {
      auto opts = c10d::ProcessGroupGloo::Options::create(wait_limit);
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      opts->threads = 2;
      auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, ws, opts);
      raw_all_reduce = [pg, wait_limit](std::vector<at::Tensor>& t) { pg->allreduce(t)->wait(wait_limit); };
    } else {
#if KINDLING_BENCH_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = wait_limit;
      auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, ws, opts);
      raw_all_reduce = [pg, wait_limit](std::vector<at::Tensor>& t) { pg->allreduce(t)->wait(wait_limit); };
#else
      std::fprintf(stderr,
                   "bench_collectives: this build has no nccl backend (a CUDA LibTorch, -DKINDLING_WITH_NCCL=ON)\n");
      return 2;
#endif
    }
  }
  const auto dev = kd::device();
  const char* peer = mpi ? "MPI" : "c10d";
  const char* engine = mpi ? "MPI_Allreduce" : backend == "nccl" ? "c10d ProcessGroupNCCL" : "c10d ProcessGroupGloo";

  if (rank == 0) {
    std::printf(
        "# kindling (%s) vs raw %s, all_reduce SUM float, %d ranks, %d iters x %d rounds (median), both on %s %s\n",
        backend.c_str(), engine, ws, iters, reps,
        memory == "buffer" ? "kindling::dist::empty_comm_buffer memory" : "ordinary tensors", dev.str().c_str());
    std::printf("# %10s %10s %6s %6s %12s %9s %9s %10s(us) %9s %7s%s\n", "size(B)", "count", "type", "redop",
                "kindling(us)", "algbw", "busbw", peer, "busbw", "ratio", mpi ? "  memcpy(GB/s) busbw/memcpy" : "");
  }
  const double bus = 2.0 * (ws - 1) / ws;
  int wrong_total = 0;
  double busbw_sum = 0;
  int rows = 0;
  for (int64_t bytes = begin; bytes <= end; bytes *= factor) {
    const int64_t count = std::max<int64_t>(1, bytes / 4);
    // -m buffer: both sides reduce memory from empty_comm_buffer (on mpi, the shared window).
    auto make = [&] {
      return memory == "buffer" ? kd::empty_comm_buffer({count}, at::kFloat).fill_(1.0f)
                                : at::full({count}, 1.0f, at::TensorOptions().device(dev));
    };
    auto t = make();
    std::vector<at::Tensor> raw{make()};
    const int n = bytes >= (16 << 20) ? std::max(5, iters / 10) : iters;
    auto run_kindling = [&] { kd::all_reduce(t); };
    auto run_raw = [&] {
#if KINDLING_BENCH_MPI
      if (mpi) {
        MPI_Allreduce(MPI_IN_PLACE, raw[0].data_ptr<float>(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        return;
      }
#endif
      raw_all_reduce(raw);
    };
    for (int i = 0; i < warmup; ++i) {
      run_kindling();
      run_raw();
    }
    std::vector<double> tk, tr;
    for (int r = 0; r < reps; ++r) {
      if (r % 2 == 0) {
        tk.push_back(time_calls(n, run_kindling));
        tr.push_back(time_calls(n, run_raw));
      } else {
        tr.push_back(time_calls(n, run_raw));
        tk.push_back(time_calls(n, run_kindling));
      }
    }
    // Correctness: reduce fresh values once and count wrong elements.
    t.fill_(static_cast<float>(rank + 1));
    kd::all_reduce(t);
    const int wrong = static_cast<int>((t != static_cast<float>(ws * (ws + 1) / 2)).sum().item<int64_t>());
    wrong_total += wrong;
    t.fill_(1.0f);
    const double k = median(tk), c = median(tr);
    const double algbw = static_cast<double>(count * 4) / k / 1e9;
    const double algbw_c = static_cast<double>(count * 4) / c / 1e9;
    busbw_sum += algbw * bus;
    ++rows;
    // memcpy of the same number of bytes, same rounds (mpi only): shared memory's bound.
    double copy_bw = 0;
    if (mpi) {
      // glibc's memcpy is much slower on this CPU when source and destination share their
      // offset within a 4 KiB page (8 KiB - 1 MiB here): take the faster of two placements.
      std::vector<char> src(static_cast<std::size_t>(count * 4), 1), dst(static_cast<std::size_t>(count * 4 + 4096), 2);
      kd::barrier();  // no rank is still busy-polling in a collective
      for (std::size_t shift : {std::size_t{0}, std::size_t{1088}}) {
        std::vector<double> tm;
        for (int r = 0; r < reps; ++r) {
          tm.push_back(time_calls(n, [&] { std::memcpy(dst.data() + shift, src.data(), src.size()); }));
        }
        copy_bw = std::max(copy_bw, static_cast<double>(count * 4) / median(tm) / 1e9);
      }
    }
    if (rank == 0) {
      std::printf("  %10lld %10lld %6s %6s %12.2f %9.3f %9.3f %14.2f %9.3f %7.3f %d", static_cast<long long>(count * 4),
                  static_cast<long long>(count), "float", "sum", k * 1e6, algbw, algbw * bus, c * 1e6, algbw_c * bus,
                  k / c, wrong);
      if (mpi) std::printf("  %12.3f %10.3f", copy_bw, algbw * bus / copy_bw);
      std::printf("\n");
    }
  }
  if (rank == 0) {
    std::printf("# ratio = kindling time / raw %s time (lower is better; 1.0 = same); then #wrong\n", peer);
    std::printf("# Out of bounds values : %d %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_sum / rows);
  }
  kd::finalize();
  return wrong_total == 0 ? 0 : 1;
}
