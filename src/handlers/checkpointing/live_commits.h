#pragma once
// Live recovery's commits (kindling/handlers/checkpointing/live_recovery.h): what a rank keeps in
// memory of the kept objects, and how the ranks of a new world get it back. Objects whose state
// every rank holds whole are committed whole and sent from one rank. A sharded model and its
// optimizer (kindling::handlers::Stateful::sharded_part) commit this rank's part alone
// (ShardedModel::local_state_dict), and a copy of it goes to one other rank, its buddy: the same
// local rank on the next node where the world is whole nodes of nproc_per_node ranks (else the next
// rank, possibly on the same node), so that the parts of a lost node live on elsewhere. Internal to src/handlers/checkpointing/.
#include <ATen/core/ivalue.h>

#include <cstdint>

#include "kindling/engine/state_dict.h"
#include "kindling/handlers/checkpointing/stateful.h"

namespace kindling {
namespace handlers {
namespace detail {

// One commit: the kept objects' states at one iteration, and where in its world it was made.
struct Commit {
  int64_t iteration = -1;                // -1: none
  StateDict whole = new_state_dict();    // the objects held whole on every rank, by name
  c10::IValue own;                       // this rank's parts {"<model index>": local state}; None without sharded models
  c10::IValue buddy;                     // the buddy's parts, None where the world had one rank
  int64_t rank = -1, world = 0, buddy_rank = -1;  // in the world the commit was made in
};

class LiveCommits {
 public:
  // Commits `objects` at `iteration` (copies of their tensors). Without a sharded model: local.
  // With one: a collective over the world (each rank's parts sent to its buddy, then one
  // all_reduce that every rank holds its buddy's), and the new commit replaces the last one only
  // after that; CommunicationError / TimeoutError leave the last one in place (and the new one
  // aside where the exchange finished: restore() takes it when another rank got past the
  // all_reduce). Throws kindling::UsageError for a sharded model over a group that is not the world.
  void commit(const Objects& objects, int64_t iteration);
  // In a new world (every rank, joiners included): the ranks agree on the newest commit every part
  // of which survives (one all_gather of a few numbers), the whole objects' state is sent by the
  // lowest rank that has it, and each sharded model's parts, each from the lowest rank holding it,
  // one at a time, every rank keeping what overlaps its own pieces (load_local_state_dicts). Loads
  // nothing on the job's first world (no rank has a commit). A collective over the world. Throws
  // kindling::UsageError on every rank, before anything changes, when some rank's part was lost
  // with its copy (naming the rank); what loading the objects throws; CommunicationError / TimeoutError.
  void restore(const Objects& objects);
  // The iteration of the last commit (-1 before the first).
  int64_t iteration() const { return committed_.iteration; }

 private:
  Commit committed_, staged_;  // staged_: a commit whose exchange finished, not yet agreed
};

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
