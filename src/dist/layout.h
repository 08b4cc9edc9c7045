#pragma once
// Internal to initialize() (runtime.cpp): the address of a tcp:// init_method, and where
// this rank sits among the nodes.
#include <optional>
#include <string>
#include <utility>

#include "dist/runtime_state.h"

namespace kindling {
namespace dist {
namespace detail {

/// Parses "tcp://host:port" into host and port.
std::pair<std::string, int> parse_tcp(const std::string& url);

/// Works out local rank, processes per node, node count and node rank (idist §2.4-2.5):
/// LOCAL_RANK / LOCAL_WORLD_SIZE / GROUP_RANK when the launcher provides them, else the
/// largest local_rank + 1, else (no LOCAL_RANK at all) from every rank's host name,
/// assuming the ranks of one host are contiguous. What the ranks need from each other goes
/// through the rendezvous store, never through a collective on the process group, so that
/// a plain torch.distributed peer's first collective is never matched against it (only a
/// store-less external group falls back to collectives).
void compute_layout(Runtime& rt, std::optional<int> env_local_rank);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
