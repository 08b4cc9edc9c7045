#pragma once
// Internal to initialize() (runtime.cpp): the address of a tcp:// init_method, where this
// rank sits among the nodes, and what it publishes in the environment.
#include <optional>
#include <string>
#include <utility>

#include "dist/base/world_config.h"
#include "dist/runtime_state.h"
#include "kindling/dist/launch_env.h"

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

/// Writes what the process now is into the environment, for programs that read it as idist's
/// users do (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
/// MASTER_PORT; after a live-recovery rejoin also the variables a process the launcher started
/// in that round would have, launch/entered_round.h), in one write that kindling's other
/// threads never see half done (common/env.h). finalize() restores what it replaced.
void publish_environment(const WorldConfig& cfg, const LaunchEnvironment& launch);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
