// DDP's bucket-size autotune (DdpOptions::autotune_bucket_cap_mb): each size for a few
// synchronised steps, scored by the slowest rank's median step, then the best size stays
// (src/nn/ddp/ddp_autotune.h).
#include "nn/ddp/ddp_autotune.h"

#include <algorithm>
#include <sstream>

#include "kindling/log.h"

namespace kindling {
namespace nn {
namespace detail {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void Autotune::after_step(int64_t step, const StepTimes& times, double cap_mb, const dist::Group& group,
                          const std::function<void(double)>& use) {
  if (done_) return;
  if (step == 1) {  // the first step: its forward broadcasts and its backward rebuilds
    use(sizes_.front());
    return;
  }
  step_seconds_.push_back(times.between_steps + times.forward + times.backward + times.communication_wait +
                          times.write_back);
  if (static_cast<int64_t>(step_seconds_.size()) < steps_) return;
  // The first step of a size made its buckets: not counted.
  const std::vector<double> timed(step_seconds_.begin() + 1, step_seconds_.end());
  const double score = dist::all_reduce(median(timed), dist::ReduceOp::kMax, group);
  scores_.push_back({sizes_[trial_], score});
  step_seconds_.clear();
  if (++trial_ < sizes_.size()) {
    use(sizes_[trial_]);
    return;
  }
  const auto best = std::min_element(scores_.begin(), scores_.end(),
                                     [](const BucketTrial& a, const BucketTrial& b) { return a.step_seconds < b.step_seconds; });
  if (best->bucket_cap_mb != cap_mb) use(best->bucket_cap_mb);
  done_ = true;
  std::ostringstream line;
  line << "kindling::nn::DistributedDataParallel: bucket autotune chose " << best->bucket_cap_mb << " MiB (median step";
  for (const auto& s : scores_) line << " " << s.bucket_cap_mb << " MiB: " << s.step_seconds * 1e3 << " ms;";
  line << " the slowest rank's)";
  log(dist::get_rank() == group.ranks().front() ? LogLevel::kInfo : LogLevel::kDebug, line.str());
}

}  // namespace detail
}  // namespace nn
}  // namespace kindling
