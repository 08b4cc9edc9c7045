#pragma once
// Stall monitor: tells a timed-out collective which ranks are stuck, and where.
//
// Each rank counts the collectives it enters on each group (GroupState::seq, one atomic
// increment per call, nothing else on the hot path). A background thread publishes changed
// counters to the shared store every 50 ms under "kindling/progress/<group>/<rank>". When a
// collective times out, the waiting rank reads its peers' counters: a peer whose counter is
// below its own never arrived at this collective; one at the same count but in another
// collective called the collectives in a different order.
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

class StallMonitor {
 public:
  StallMonitor(c10::intrusive_ptr<c10d::Store> store, int rank);
  ~StallMonitor();
  void track(const std::shared_ptr<GroupState>& group);
  /// Describes, for a collective that timed out at `seq` on `group`, which members did not
  /// arrive. Never throws.
  std::string diagnose(const GroupState& group, int64_t seq, const char* op);

 private:
  void loop();
  void publish_changes();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::pair<std::weak_ptr<GroupState>, int64_t>> groups_;  // group, last published seq
  std::thread thread_;
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
