// DDP's bucket-size autotune (DdpOptions::autotune_bucket_cap_mb): each size for a few
// synchronised steps, scored by the slowest rank's median step, then the best size stays.
#include <algorithm>
#include <sstream>

#include "kindling/dist/dist.h"
#include "kindling/log.h"
#include "nn/ddp_state.h"

namespace kindling {
namespace nn {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void GradientReducer::State::autotune_after_step() {
  if (autotune.done) return;
  const auto& sizes = options.autotune_bucket_cap_mb();
  // The buckets keep their order (that of readiness where the first backward rebuilt them).
  auto use = [&](double cap) {
    options.bucket_cap_mb(cap);
    std::vector<std::size_t> order;
    for (const auto& b : buckets) order.insert(order.end(), b.members.begin(), b.members.end());
    remake_buckets(order);
  };
  if (synchronized == 1) {  // the first step: its forward broadcasts and its backward rebuilds
    use(sizes.front());
    return;
  }
  autotune.step_seconds.push_back(times.between_steps + times.forward + times.backward + times.communication_wait +
                                  times.write_back);
  if (static_cast<int64_t>(autotune.step_seconds.size()) < options.autotune_steps()) return;
  // The first step of a size made its buckets: not counted.
  const std::vector<double> timed(autotune.step_seconds.begin() + 1, autotune.step_seconds.end());
  const double score = dist::all_reduce(median(timed), dist::ReduceOp::kMax, options.group());
  autotune.scores.push_back({sizes[autotune.trial], score});
  autotune.step_seconds.clear();
  if (++autotune.trial < sizes.size()) {
    use(sizes[autotune.trial]);
    return;
  }
  const auto best = std::min_element(autotune.scores.begin(), autotune.scores.end(),
                                     [](const BucketTrial& a, const BucketTrial& b) { return a.step_seconds < b.step_seconds; });
  if (best->bucket_cap_mb != options.bucket_cap_mb()) use(best->bucket_cap_mb);
  autotune.done = true;
  std::ostringstream line;
  line << "kindling::nn::DistributedDataParallel: bucket autotune chose " << best->bucket_cap_mb << " MiB (median step";
  for (const auto& s : autotune.scores) line << " " << s.bucket_cap_mb << " MiB: " << s.step_seconds * 1e3 << " ms;";
  line << " the slowest rank's)";
  log(dist::get_rank() == options.group().ranks().front() ? LogLevel::kInfo : LogLevel::kDebug, line.str());
}

}  // namespace nn
}  // namespace kindling
