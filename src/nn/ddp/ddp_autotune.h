#pragma once
// DistributedDataParallel's bucket-size autotune (DdpOptions::autotune_bucket_cap_mb), owned by
// the reducer (src/nn/ddp/ddp_state.h): the size being tried, its steps' times, the scores so far.
// Each size runs for autotune_steps synchronised steps, scored by the slowest rank's median
// step (its first step, which made the buckets, not counted); then the best size stays.
//
// Invariants: trial() < the number of sizes while !done(); scores() has one entry per size
// tried to its end, in the order tried. Not thread-safe: the reducer calls it under its lock.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/nn/ddp.h"

namespace kindling {
namespace nn {
namespace detail {

class Autotune {
 public:
  // Tries `sizes` (MiB, checked positive), `steps` synchronised steps each; with none it is done
  // from the start.
  Autotune(std::vector<double> sizes, int64_t steps)
      : sizes_(std::move(sizes)), steps_(steps), done_(sizes_.empty()) {}

  // Whether the best size is in use (or the autotune never started).
  bool done() const { return done_; }
  // The sizes scored so far, in the order tried.
  const std::vector<BucketTrial>& scores() const { return scores_; }

  // After synchronised step number `step` (its breakdown `times`; `cap_mb` the size in use) while
  // !done(): calls `use(size)` where the buckets must be made at another size (after the first
  // step, after each size's last step, and for the best size). A collective over `group` after
  // each size's last step (an all-reduce of the score: every rank of the group, at the same
  // step); logs the choice at the end. Throws what `use` and the all-reduce throw.
  void after_step(int64_t step, const StepTimes& times, double cap_mb, const dist::Group& group,
                  const std::function<void(double)>& use);

 private:
  std::vector<double> sizes_;
  int64_t steps_;
  std::size_t trial_ = 0;
  std::vector<double> step_seconds_;
  std::vector<BucketTrial> scores_;
  bool done_;
};

}  // namespace detail
}  // namespace nn
}  // namespace kindling
