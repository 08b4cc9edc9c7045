#pragma once
// Internal backend interface of kindling::dist. Each backend (gloo and nccl through c10d,
// mpi on Open MPI) implements Communicator for one group of ranks and Backend to create
// the world and its sub-groups. Ranks in this interface are group-local.
//
// The files a backend <name> provides, in src/dist/backends/<name>/:
//   <name>_backend.h    declares <name>_traits() and the factory make_<name>_backend(WorldConfig)
//   <name>_traits.cpp   defines <name>_traits() (backend_traits.h's BackendTraits); compiled in every
//                       build, it sets `make` only where KINDLING_HAS_<NAME> says the engine is built
//   <name>_backend.cpp  the Backend and its factory (and more files as the engine needs), compiled
//                       only with KINDLING_WITH_<NAME>
// and one line in registry.cpp lists it. A wait that ends because the engine's own timeout
// passed throws EngineTimeout (dist/base/engine_error.h); generic code asks the traits,
// never the name.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/base/engine_error.h"
#include "dist/base/timeline_op.h"
#include "dist/base/world_config.h"
#include "kindling/dist/reduce_op.h"

namespace c10d {
class Store;
}

namespace kindling {
namespace dist {
namespace detail {

/// Asked during a wait whether to give up because a peer stalled: empty to go on, else the
/// complete error message (built by the stall monitor's caller, dist/collectives/call.cpp).
using StallCheck = std::function<std::string()>;

/// An operation started on a communicator; wait() throws std::exception on failure or
/// timeout (the caller turns that into a kindling error with context).
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  /// wait(), for engines whose wait cannot be cut into short waits (mpi's blocking calls
  /// and its shared-memory all_reduce): once the wait has lasted a second they call
  /// `stalled` about every 250 ms, from this or another thread, and on a non-empty answer
  /// log it and end the job (mpi cannot leave the call, nor free or finalize, without the
  /// stalled rank). Other engines just wait().
  virtual void wait_watched(std::chrono::milliseconds timeout, const StallCheck& stalled) { wait(timeout); }
  virtual bool is_completed() = 0;
  /// Asks the engine to call `done` (from any thread, once) when the operation completes, and
  /// says whether it will: false where the engine cannot tell before a wait (an mpi request
  /// progresses inside MPI's calls; a device's future completes when the work is queued), and
  /// the caller then takes the end of wait() as the operation's end. For the timeline only.
  virtual bool notify_completion(std::function<void()> /*done*/) { return false; }
  /// Group rank of the sender for a receive from any source, else -1.
  virtual int source_rank() { return -1; }
  /// Whether a wait() that ends at its timeout leaves the operation and its engine as they were,
  /// to be waited on again. False for gloo's point-to-point messages: gloo closes every
  /// connection of the group when a receive's wait times out.
  virtual bool rewaitable() { return true; }
};
using OpPtr = std::unique_ptr<PendingOp>;

/// Where a collective made of point-to-point messages runs: this member's index in the group,
/// the group's size, the collective's number on the group (GroupState::seq, the same on every
/// member), from which its messages' tags come, and the group's timeout.
struct ExchangeSlot {
  int rank = 0;
  int size = 1;
  int64_t seq = 0;
  std::chrono::milliseconds timeout{0};
};

/// One group's communication engine. Tensors are contiguous and on the backend's device.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual OpPtr all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  virtual OpPtr broadcast(at::Tensor& tensor, int root) = 0;
  /// outputs: one tensor per member (views into one buffer are fine).
  virtual OpPtr all_gather(std::vector<at::Tensor>& outputs, at::Tensor& input) = 0;
  virtual OpPtr reduce(at::Tensor& tensor, int root, ReduceOp op) = 0;
  /// outputs: one per member on the root, empty elsewhere.
  virtual OpPtr gather(std::vector<at::Tensor>& outputs, at::Tensor& input, int root) = 0;
  /// inputs: one per member on the root, empty elsewhere.
  virtual OpPtr scatter(at::Tensor& output, std::vector<at::Tensor>& inputs, int root) = 0;
  /// 1-D tensors; splits are element counts per member.
  virtual OpPtr all_to_all(at::Tensor& output, at::Tensor& input, std::vector<int64_t> output_splits,
                           std::vector<int64_t> input_splits) = 0;
  virtual OpPtr barrier() = 0;
  virtual OpPtr send(at::Tensor& tensor, int dst, int tag) = 0;
  /// src = -1 receives from any member.
  virtual OpPtr recv(at::Tensor& tensor, int src, int tag) = 0;
  /// kindling::dist::reduce_scatter / all_gather_into on 1-D tensors: reduce_scatter's `input`
  /// (all_gather_into's `output`) holds `slot.size` chunks of the other tensor's length. The
  /// defaults (src/dist/collectives/exchange.cpp) exchange the chunks point to point, receives posted
  /// before sends, and reduce in group-rank order: across hosts on gloo that beats gloo's own
  /// all-gather (docs/performance.md, "ZeRO-1"), and on mpi the messages start at once where a
  /// blocking MPI collective would start only when waited on. An engine with a native operation
  /// worth using overrides them (nccl).
  virtual OpPtr reduce_scatter(at::Tensor& output, at::Tensor& input, ReduceOp op, const ExchangeSlot& slot);
  virtual OpPtr all_gather_into(at::Tensor& output, at::Tensor& input, const ExchangeSlot& slot);
  /// Memory this engine reduces fastest from (see kindling::dist::empty_comm_buffer).
  virtual at::Tensor empty_buffer(at::IntArrayRef sizes, const at::TensorOptions& options);
};

/// Shared state of a group (world or new_group) on this rank.
struct GroupState {
  int id = 0;                          // 0 = world, k = k-th new_group
  std::vector<int> ranks;              // global ranks, ascending
  int group_rank = -1;                 // this rank's index in `ranks`, -1 if not a member
  std::shared_ptr<Communicator> comm;  // null on non-members
  std::chrono::milliseconds timeout{0};
  std::atomic<bool> valid{true};  // false after finalize()

  // Progress, read by the progress monitor: how many collectives this rank entered on
  // the group and the name of the last one.
  std::atomic<int64_t> seq{0};
  std::atomic<const char*> op{""};

  std::string label() const { return id == 0 ? std::string("world") : "group #" + std::to_string(id); }
  int global_rank(int index) const { return ranks.at(static_cast<std::size_t>(index)); }
  int index_of(int global) const {
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == global) return static_cast<int>(i);
    return -1;
  }
};

struct WorkState {
  OpPtr op;
  std::shared_ptr<GroupState> group;
  const char* name = "";
  int64_t seq = 0;
  bool waited = false;
  bool collective = false;  // collectives get the engine's slack on wait; p2p waits the timeout
  int64_t record = -1;      // its flight recorder entry (flight_recorder.h), -1 when none
  TimelineOp timeline;      // its span on the timeline (timeline_ops.h), while its end is to be recorded at wait
};

/// Where this rank sits, when the backend knows it better than the environment (MPI).
struct NodeLayout {
  int local_rank = 0;
  int nproc_per_node = 1;
  int node_rank = 0;
  int nnodes = 1;
};

/// Creates the world communicator and sub-groups of one backend.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<Communicator> world() = 0;
  /// Called by every rank in the same order; returns null when this rank is not a member.
  virtual std::shared_ptr<Communicator> create_group(int group_index, const std::vector<int>& ranks,
                                                     int group_rank) = 0;
  /// Key-value store shared by all ranks (for progress tracking), or null.
  virtual c10::intrusive_ptr<c10d::Store> store() = 0;
  /// Where the stall monitor reads and writes progress; no store disables it.
  /// Default: store(), host unknown (defined in stall_monitor.cpp).
  virtual MonitorTarget monitor_target();
  /// The node layout, when the engine provides it (else it comes from the environment).
  virtual std::optional<NodeLayout> layout() { return std::nullopt; }
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
