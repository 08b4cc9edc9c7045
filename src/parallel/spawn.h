#pragma once
// Parallel's spawn mode: this program starts its node's ranks under the supervisor, with a
// fixed layout (nnodes / node_rank / master_*) or in elastic rendezvous rounds
// (rdzv_endpoint). Internal to src/parallel/.
#include <functional>

#include "kindling/dist/dist.h"
#include "kindling/dist/parallel.h"

namespace kindling {
namespace dist {

/// The InitOptions a Parallel's ranks initialize with (init_method, timeout, stall_timeout).
InitOptions parallel_init_options(const ParallelOptions& o);

/// Starts this node's nproc_per_node ranks and waits for them (restarts and elastic rounds
/// included); each runs `fn(local_rank)`. `index` is this Parallel's number in the process
/// (KINDLING_PARALLEL_CHILD of the children). Throws kindling::LaunchError naming what
/// failed when the job fails.
void spawn_ranks(const ParallelOptions& o, int index, const std::function<void(int)>& fn);

}  // namespace dist
}  // namespace kindling
