#pragma once
// Stall monitor: finds ranks that stopped making collective progress, and says where.
//
// Each rank counts the collectives it enters on each group (GroupState::seq, one atomic
// increment per call, nothing else on the hot path). A background thread publishes
// "<seq> <op> <heartbeat>" to the shared store under "kindling/progress/<group>/<rank>":
// at most 50 ms after the counter changes, and at least every heartbeat interval.
//
// While this rank waits in a collective, the same thread reads its peers' entries. A peer
// whose counter stays below this rank's for the stall period never arrived; one at the
// same count in another collective called them in another order. A store that stops
// answering for the stall period means its host (rank 0, unless torchrun's agent hosts
// it) is stalled. The waiting thread asks for a verdict between short waits (call.h) and
// throws kindling::TimeoutError naming the stalled ranks.
//
// At finalize() a rank marks its entries "finished"; a rank whose collective then fails on a
// closed connection reads them (finished_peers) and says that the peer left normally.
//
// c10d's TCPStore client (LibTorch 1.13) has no timeout on reads: a stopped server blocks
// it for ever. All store traffic of the monitor therefore runs on its own thread, which
// the verdict watches from outside, and which is left behind (detached) if it is stuck.
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

class StallMonitor {
 public:
  /// `stall_period` zero turns stall detection off (progress is still published).
  StallMonitor(MonitorTarget target, int rank, std::chrono::milliseconds stall_period);
  ~StallMonitor();
  StallMonitor(const StallMonitor&) = delete;
  StallMonitor& operator=(const StallMonitor&) = delete;

  void track(const std::shared_ptr<GroupState>& group);

  std::chrono::milliseconds stall_period() const;

  /// This rank has waited for collective #seq on `group` since `since` (called once a
  /// first short wait has expired, so fast collectives never reach the monitor); from now
  /// on the monitor reads the peers' progress.
  void begin_wait(const GroupState& group, int64_t seq, std::chrono::steady_clock::time_point since);
  void end_wait();

  /// While waiting: a description of the stalled ranks once the stall period has passed
  /// with no progress from them, else empty. Never blocks on the store; never throws.
  std::string verdict(const GroupState& group, int64_t seq, const char* op);

  /// Describes, for a collective that timed out at `seq` on `group`, which members did not
  /// arrive, from the latest reads. Never blocks on the store; never throws.
  std::string diagnose(const GroupState& group, int64_t seq, const char* op);

  /// finalize() of a rank that did not fail: publishes its entries once more, marked
  /// "finished", so that a peer still waiting in a collective can say why it will never
  /// complete; waits at most `bound` for the store. Never throws.
  void finish(std::chrono::milliseconds bound);

  /// After a collective on `group` failed because a peer closed its connections: reads
  /// every peer's entry once (waiting at most `bound`) and describes the peers that
  /// finished, e.g. "rank 1 finished (it called finalize() after its collective #3
  /// all_gather on this group)"; empty when none did or the store did not answer in time.
  /// Never throws.
  std::string finished_peers(const GroupState& group, std::chrono::milliseconds bound);

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

/// The stall period from KINDLING_STALL_TIMEOUT (seconds, 0 = off) if set, else `fallback`.
/// Throws kindling::UsageError for a malformed value.
std::chrono::milliseconds stall_period_from_env(std::chrono::milliseconds fallback);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
