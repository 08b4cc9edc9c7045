#pragma once
// How an elastic agent (elastic_agent.h) reaches the server of the rendezvous rounds
// (rendezvous_server.h): at a fixed endpoint that the agent of the endpoint's host serves
// (--rdzv_backend c10d, the default), or wherever the agent that leads in an etcd cluster
// serves it (--rdzv_backend etcd, etcd_rendezvous.cpp), which moves to another host when its
// host is lost. Internal to src/supervisor/.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/rendezvous/line_socket.h"
#include "supervisor/rendezvous/rendezvous_server.h"

namespace kindling {
namespace supervisor {

/// How one node's agent (agent/elastic_agent.h) takes part: where it reaches the rendezvous,
/// and what it brings to each round.
struct ElasticAgentOptions {
  /// The rendezvous endpoint (--rdzv_endpoint); the agent whose host owns this address serves it.
  std::string endpoint_host;
  int endpoint_port = 29400;
  /// --rdzv_backend etcd: the members of the etcd cluster ("host:port"); the agents elect the
  /// one that serves the rounds there, and another one takes over when it is lost. Empty: the
  /// endpoint above.
  std::vector<std::string> etcd_endpoints;
  /// How long a lost serving agent keeps its place in etcd (its lease) before another takes over.
  int etcd_lease_seconds = 5;
  /// Live recovery (kindling-run --live_recovery): a next round is joined with this node's
  /// workers running, and they make their new world from its layout in the same processes
  /// (live_channel.h; kindling/dist/live.h); they are stopped only when the rendezvous fails.
  bool live_recovery = false;
  /// Live recovery (kindling-run --warm_join): the workers start before the node joins its first
  /// round and wait in their first initialize() for its layout; the node joins once every one
  /// of them waits there (or after the join timeout), so the running nodes train on while its
  /// programs load, and stop only to make the new world.
  bool warm_join = false;
  /// Nodes, restarts, job identity and timeouts (rendezvous_server.h).
  RendezvousSettings rendezvous;
  /// Workers of this node (its share of the world in every round).
  int nproc_per_node = 1;
};

class RendezvousAccess {
 public:
  virtual ~RendezvousAccess() = default;
  /// Connects to the server, serving it first when this agent is the one to; tries until the
  /// join timeout. Returns an invalid socket with `error` set when it cannot. Never throws.
  virtual LineSocket connect(std::string& error) = 0;
  /// Whether the server can move to another host: then an agent that loses it connects again.
  virtual bool movable() const = 0;
  /// Whether this agent serves the rendezvous now (JOIN's serving flag).
  virtual bool serving() const = 0;
  /// Where the rendezvous is, for messages ("node0:29400", "the etcd cluster h1:2379,h2:2379").
  virtual std::string where() const = 0;
  /// This node's workers completed the job: what the access keeps for a job that goes on
  /// (etcd: the rounds' state) can go when it is destroyed. Never throws.
  virtual void finished() {}
};

/// The fixed endpoint of `options` (endpoint_host:endpoint_port); `name` names the launcher.
std::unique_ptr<RendezvousAccess> endpoint_access(const ElasticAgentOptions& options, const std::string& name);

/// The server elected in the etcd cluster of `options.etcd_endpoints` (etcd_rendezvous.cpp).
std::unique_ptr<RendezvousAccess> etcd_access(const ElasticAgentOptions& options, const std::string& name);

/// Whether the program that accepted `s` greets as a kindling-run rendezvous within 5 s; else
/// `error` says that another program holds `where` (`listen_errno`: why this host could not
/// listen there itself, 0 when it did not try). Never throws.
bool greeted(LineSocket& s, const std::string& where, int listen_errno, std::string& error);

/// Calls `attempt(error, done)` until it returns a connected socket or sets `done`, or `limit`
/// passes (then `error` says so, ending with `advice`); pauses 100-600 ms at random between tries (agents that met
/// once do not meet again) and says every 10 s what it waits for. Never throws.
LineSocket keep_trying(std::chrono::milliseconds limit, const std::string& name, const std::string& where,
                       const std::string& advice, std::string& error,
                       const std::function<LineSocket(std::string&, bool&)>& attempt);

/// Empty when one of `hosts` resolves (or fails in a way left to the connection to say); else
/// why none ever will, each named: a name that does not exist at once; a resolver that fails for
/// the time being (a DNS server that does not answer) after trying again for 30 s, said once as
/// `name`. Never throws.
std::string unresolvable(const std::vector<std::string>& hosts, const std::string& name);

/// Writes "<name>: <text>" on stderr at once. Never throws.
void say(const std::string& name, const std::string& text);

}  // namespace supervisor
}  // namespace kindling
