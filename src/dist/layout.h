#pragma once
// Internal to initialize() (runtime.cpp): the address of a tcp:// init_method, and where
// this rank sits among the nodes.
#include <optional>
#include <string>
#include <utility>

#include "dist/runtime.h"

namespace kindling {
namespace dist {
namespace detail {

/// Parses "tcp://host:port" into host and port.
std::pair<std::string, int> parse_tcp(const std::string& url);

/// Works out local rank, processes per node, node count and node rank (idist §2.4-2.5):
/// LOCAL_RANK / LOCAL_WORLD_SIZE / GROUP_RANK when the launcher provides them, else a
/// MAX all-reduce of local_rank + 1, else (no LOCAL_RANK at all) host names gathered from
/// every rank, assuming the ranks of one host are contiguous.
void compute_layout(Runtime& rt, std::optional<int> env_local_rank);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
