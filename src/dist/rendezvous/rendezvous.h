#pragma once
// Rendezvous: the key-value store through which ranks find each other (c10d TCPStore or
// FileStore), laid out exactly as Python's torch.distributed lays it out so that kindling
// and Python ranks can share one job.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/base/world_config.h"

namespace kindling {
namespace dist {
namespace detail {

/// Connects to the store named by `config.init_method` ("env://", "tcp://host:port",
/// "file:///path"). Rank 0 hosts a TCPStore unless torchrun's agent already does
/// (TORCHELASTIC_USE_AGENT_STORE=True and the store is at the agent's MASTER_ADDR:MASTER_PORT:
/// every rank is a client; up to LibTorch 2.5 under the prefix
/// /worker/attempt_<TORCHELASTIC_RESTART_COUNT>, as torch.distributed of that version). Returns the store under the "default_pg"
/// prefix, as init_process_group uses it. Throws kindling::TimeoutError when the store
/// cannot be reached within the timeout.
c10::intrusive_ptr<c10d::Store> connect_store(const WorldConfig& config);

/// Remembers the generation of the store that connect_store returned for `config` (a
/// store rank 0 of kindling hosts at a tcp/env address), so that a later initialize() on the
/// same address does not join that store again while its host finalizes. Call once the
/// world's rendezvous is done (rank 0 has written the generation by then); every rank may
/// call it. Never throws.
void remember_store_generation(const WorldConfig& config, const c10::intrusive_ptr<c10d::Store>& store);

/// Who hosts the store of `config`, for messages: "the rendezvous store at host:port",
/// "torchrun's agent store at host:port" or "the file store '/path'". Never throws.
std::string store_place(const WorldConfig& config);

/// A second connection to the same store, with the same prefixes, for the stall monitor
/// (a file store is shared, it has no connection to block), and who hosts the store.
/// Call after connect_store succeeded. Throws kindling::CommunicationError.
MonitorTarget connect_monitor_store(const WorldConfig& config);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
