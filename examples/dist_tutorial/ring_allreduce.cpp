// ring-allreduce: hand-made rings against the built-in all_reduce.
#include <torch/torch.h>

#include <kindling/kindling.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ring_all_reduce.h"
#include "tutorial.h"

namespace kd = kindling::dist;

namespace dist_tutorial {

namespace {

/// Mean seconds per call of `fn` over `iters` calls, as seen by the slowest rank. Every
/// rank must call it.
template <typename Fn>
double seconds_per_call(int iters, Fn&& fn) {
  kd::barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  return kd::all_reduce(mine, kd::ReduceOp::kMax);
}

void print_timing(const std::string& name, double seconds, double reference) {
  char line[200];
  std::snprintf(line, sizeof line, "  %-46s %10.3f ms %8.2fx", name.c_str(), seconds * 1e3,
                reference > 0 ? seconds / reference : 0.0);
  say(line);
}

}  // namespace

void run_ring_all_reduce(const Options& o) {
  const int rank = kd::get_rank();
  const int size = kd::get_world_size();
  section("ring-allreduce: ring all-reduce from isend / recv");

  struct Implementation {
    const char* name;
    torch::Tensor (*all_reduce)(const torch::Tensor&);
  };
  const Implementation implementations[] = {
      {"ring (tutorial)", &dist_tutorial::ring_all_reduce},
      {"chunked ring (reduce-scatter + all-gather)", &dist_tutorial::chunked_ring_all_reduce},
  };

  // Different data on every rank, reproducible from --seed.
  torch::manual_seed(o.seed + static_cast<uint64_t>(rank));
  const torch::Tensor input = torch::randn({o.numel}, torch::TensorOptions().device(kd::device()));
  const torch::Tensor expected = kd::all_reduce(input.clone());

  // Correctness first. The sums are added in other orders than the built-in's, so allow
  // float rounding. Every rank learns every rank's verdict, so all of them fail together.
  for (const auto& impl : implementations) {
    const torch::Tensor got = impl.all_reduce(input);
    const bool close = torch::allclose(got, expected, /*rtol=*/1e-5, /*atol=*/1e-5);
    const double error = kd::all_reduce((got - expected).abs().max().item<double>(), kd::ReduceOp::kMax);
    const int64_t wrong = kd::all_reduce(static_cast<int64_t>(close ? 0 : 1));
    if (rank == 0 && wrong == 0) {
      say(impl.name, ": same result as kindling::dist::all_reduce on all ", size, " ranks (max |error| ", error, ")");
    }
    KINDLING_CHECK_T(kindling::Error, wrong == 0, "dist_tutorial ring-allreduce: ", impl.name,
                     " differs from kindling::dist::all_reduce on ", wrong, " of ", size, " ranks (max |error| ", error,
                     ", tolerance 1e-5)");
  }

  // Timing: every variant pays for one copy of the input, as the built-in reduces in place.
  const double builtin = seconds_per_call(o.iters, [&] { kd::all_reduce(input.clone()); });
  std::vector<double> seconds;
  for (const auto& impl : implementations) {
    seconds.push_back(seconds_per_call(o.iters, [&] { impl.all_reduce(input); }));
  }
  if (rank == 0) {
    say("mean time per call over ", o.iters, " calls, ", o.numel, " floats (",
        fixed(static_cast<double>(o.numel) * 4 / (1 << 20), 2), " MiB), slowest of ", size,
        " ranks; ratio to built-in:");
    print_timing("kindling::dist::all_reduce (built-in)", builtin, builtin);
    for (std::size_t i = 0; i < seconds.size(); ++i) print_timing(implementations[i].name, seconds[i], builtin);
  }
}

}  // namespace dist_tutorial
