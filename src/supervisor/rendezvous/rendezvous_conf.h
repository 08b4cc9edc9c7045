#pragma once
// What a user writes to reach and tune the elastic rendezvous, read the same way by
// kindling-run (--rdzv_endpoint, --rdzv_conf) and by Parallel's spawn mode (rdzv_endpoint,
// rdzv_conf): an endpoint, the members of an etcd cluster, and torchrun-style K=V settings.
#include <string>
#include <vector>

#include "supervisor/rendezvous/rendezvous_access.h"

namespace kindling {
namespace supervisor {

/// Reads a rendezvous endpoint: "host", "host:port" or "[IPv6 address]:port" (the port
/// stays `port`'s value when not given). Returns what is wrong with `text` (empty when it is
/// fine: then `host` and `port` are set). Never throws.
std::string parse_endpoint(const std::string& text, std::string& host, int& port);

/// Reads the members of an etcd cluster (--rdzv_backend etcd's --rdzv_endpoint):
/// "host[:port],host[:port],..." with etcd's client port 2379 where none is given; appends
/// each as "host:port" ("[v6]:port") to `members`. Returns what is wrong with `text` (empty
/// when it is fine). Never throws.
std::string parse_etcd_members(const std::string& text, std::vector<std::string>& members);

/// The settings --rdzv_conf takes, "K=V,K=V", with what each sets (kindling-run --help says
/// what they mean):
///   join_timeout=S           rendezvous.join_timeout
///   last_call_timeout=S      rendezvous.last_call
///   keep_alive_interval=S    rendezvous.keep_alive_interval
///   keep_alive_max_attempt=N rendezvous.keep_alive_max_attempt (1 to 100)
///   takeover_wait=S          rendezvous.rejoin_grace
///   lease=N                  etcd_lease_seconds (whole seconds, 1 to 3600; --rdzv_backend etcd)
/// Applies `text` to `options` from left to right. Returns what is wrong (which setting, the
/// value seen, what it takes), empty when all of it applied. Never throws.
std::string apply_rdzv_conf(const std::string& text, ElasticAgentOptions& options);

}  // namespace supervisor
}  // namespace kindling
