#pragma once
// DistributedDataParallel's step timing (StepTimes, include/kindling/nn/ddp.h), owned by the
// reducer (src/nn/ddp/ddp_state.h): when a synchronised step's forward started and ended, when the
// previous step ended, and the last step's breakdown; the DDP spans on the timeline.
// Not thread-safe: the reducer calls it under its lock.
#include <chrono>
#include <cstdint>
#include <utility>

#include "kindling/nn/ddp.h"
#include "kindling/timeline.h"

namespace kindling {
namespace nn {
namespace detail {

class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;

  static double seconds(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  }

  // A synchronised forward starts now (user's thread): this step's forward is timed.
  void forward_started() {
    forward_start_ = Clock::now();
    forward_timed_ = true;
  }
  // The module's forward returned (or threw).
  void forward_ended() { forward_end_ = Clock::now(); }
  // The synchronised backward's wait for its reductions, from `from` to `to`.
  void waited(Clock::time_point from, Clock::time_point to) { last_wait_s_ = seconds(from, to); }

  // Closes synchronised step number `step` (bucket size `cap_mb`): its computation ended at
  // `compute_end`, its wait at `wait_end`, its write-back now. Records the DDP spans when the
  // timeline records (inside the caller's backward span: what DDP adds at its end).
  void step_ended(int64_t step, double cap_mb, Clock::time_point compute_end, Clock::time_point wait_end) {
    const auto end = Clock::now();
    StepTimes t;
    t.step = step;
    if (forward_timed_) {
      t.between_steps = times_.step > 0 ? seconds(last_step_end_, forward_start_) : 0;
      t.forward = seconds(forward_start_, forward_end_);
      t.backward = seconds(forward_end_, compute_end);
    }
    t.communication_wait = seconds(compute_end, wait_end);
    t.write_back = seconds(wait_end, end);
    t.bucket_cap_mb = cap_mb;
    times_ = t;
    if (timeline::recording()) {
      record_span("DDP wait for buckets", compute_end, wait_end);
      record_span("DDP write back", wait_end, end);
    }
    last_step_end_ = end;
    forward_timed_ = false;
  }

  // The last synchronised step's breakdown (step 0 before the first).
  const StepTimes& last() const { return times_; }
  // The last synchronised backward's wait for its reductions, in seconds (0 before the first).
  double last_wait_seconds() const { return last_wait_s_; }

 private:
  static void record_span(const char* name, Clock::time_point from, Clock::time_point to) {
    timeline::TimelineEvent e;
    e.name = name;
    e.lane = timeline::Lane::kStep;
    e.start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(from.time_since_epoch()).count();
    e.end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(to.time_since_epoch()).count();
    timeline::record(std::move(e));
  }

  Clock::time_point forward_start_, forward_end_, last_step_end_;
  bool forward_timed_ = false;
  StepTimes times_;
  double last_wait_s_ = 0;
};

}  // namespace detail
}  // namespace nn
}  // namespace kindling
