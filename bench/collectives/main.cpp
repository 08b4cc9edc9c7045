// bench_collectives: all_reduce latency and bandwidth of kindling vs raw c10d
// ProcessGroupGloo, measured in the same run, in the style of nccl-tests.
//
//   export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600
//   for r in 0 1; do RANK=$r ./bench_collectives -b 4 -e 64M -f 4 -n 200 -w 20 & done; wait
//
// Each size runs `reps` rounds; a round times n kindling calls and n raw c10d calls back
// to back (alternating which goes first), so both see the same machine state. Reported
// times are the median over rounds of the per-call mean. busbw = algbw * 2(n-1)/n.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <kindling/kindling.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace kd = kindling::dist;

namespace {

int64_t parse_size(const std::string& s) {
  int64_t v = std::stoll(s);
  char unit = s.empty() ? 0 : s.back();
  if (unit == 'K' || unit == 'k') v <<= 10;
  if (unit == 'M' || unit == 'm') v <<= 20;
  if (unit == 'G' || unit == 'g') v <<= 30;
  return v;
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
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "-b") begin = parse_size(v);
    else if (a == "-e") end = parse_size(v);
    else if (a == "-f") factor = std::stoi(v);
    else if (a == "-n") iters = std::stoi(v);
    else if (a == "-w") warmup = std::stoi(v);
    else if (a == "-r") reps = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: bench_collectives [-b 4] [-e 64M] [-f 4] [-n 100] [-w 10] [-r 7]\n");
      return 2;
    }
  }
  kd::initialize("gloo");
  const int rank = kd::get_rank(), ws = kd::get_world_size();

  // The peer: a raw c10d ProcessGroupGloo on its own store (next port), same options.
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT")) + 1);
  so.isServer = rank == 0;
  so.numWorkers = ws;
  so.waitWorkers = rank != 0;
  so.timeout = std::chrono::seconds(60);
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"), so);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  opts->threads = 2;
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("raw", store), rank, ws, opts);

  if (rank == 0) {
    std::printf("# kindling vs raw c10d ProcessGroupGloo, all_reduce SUM float, %d ranks, %d iters x %d rounds (median)\n",
                ws, iters, reps);
    std::printf("# %10s %10s %6s %6s %12s %9s %9s %12s %9s %7s\n", "size(B)", "count", "type", "redop",
                "kindling(us)", "algbw", "busbw", "c10d(us)", "busbw", "ratio");
  }
  const double bus = 2.0 * (ws - 1) / ws;
  int wrong_total = 0;
  double busbw_sum = 0;
  int rows = 0;
  for (int64_t bytes = begin; bytes <= end; bytes *= factor) {
    const int64_t count = std::max<int64_t>(1, bytes / 4);
    auto t = at::full({count}, 1.0f);
    std::vector<at::Tensor> raw{at::full({count}, 1.0f)};
    const int n = bytes >= (16 << 20) ? std::max(5, iters / 10) : iters;
    auto run_kindling = [&] { kd::all_reduce(t); };
    auto run_raw = [&] { pg->allreduce(raw)->wait(); };
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
    if (rank == 0) {
      std::printf("  %10lld %10lld %6s %6s %12.2f %9.3f %9.3f %12.2f %9.3f %7.3f %d\n", static_cast<long long>(count * 4),
                  static_cast<long long>(count), "float", "sum", k * 1e6, algbw, algbw * bus, c * 1e6, algbw_c * bus,
                  k / c, wrong);
    }
  }
  if (rank == 0) {
    std::printf("# ratio = kindling time / raw c10d time (lower is better; 1.0 = same); last column: #wrong\n");
    std::printf("# Out of bounds values : %d %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_sum / rows);
  }
  kd::finalize();
  return wrong_total == 0 ? 0 : 1;
}
