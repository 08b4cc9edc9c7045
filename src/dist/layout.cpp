// initialize()'s helpers: the tcp:// init_method's address, the node layout and the published
// environment; see layout.h.
#include "dist/layout.h"

#include <algorithm>
#include <map>
#include <vector>

#include "common/env.h"
#include "dist/agreement.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "launch/entered_round.h"

namespace kindling {
namespace dist {
namespace detail {

using ::kindling::detail::get_env_int;
using ::kindling::detail::parse_int;

std::pair<std::string, int> parse_tcp(const std::string& url) {
  const std::string rest = url.substr(6);
  auto colon = rest.rfind(':');
  KINDLING_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < rest.size(),
                 "kindling::dist::initialize: init_method '", url,
                 "' needs a host and a port, as in tcp://10.0.0.1:29500");
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::string port_text = rest.substr(colon + 1);
  auto slash = port_text.find_first_of("/?");
  if (slash != std::string::npos) port_text = port_text.substr(0, slash);
  return {host, parse_int(port_text, "the port of init_method '" + url + "'")};
}

namespace {

// Every rank's (host name, local rank or -1), exchanged under "kindling/layout/<rank>" in
// the rendezvous store (a foreign peer's entry is ("", -1)); through all_gather only for an
// external group, whose ranks did not announce themselves.
std::vector<std::pair<std::string, int>> exchange_layout(Runtime& rt, int local_rank) {
  const std::string mine = std::to_string(local_rank) + " " + hostname();
  std::vector<std::string> entries;
  if (rt.external_pg) {
    entries = all_gather(mine);
  } else {
    for (const auto& entry : exchange(rt, "layout", mine))
      entries.push_back(entry.value_or("-1 "));  // a foreign peer: host and local rank unknown
  }
  std::vector<std::pair<std::string, int>> out;
  for (const auto& e : entries) {
    const auto space = e.find(' ');
    out.emplace_back(e.substr(space + 1), std::stoi(e.substr(0, space)));
  }
  return out;
}

}  // namespace

void compute_layout(Runtime& rt, std::optional<int> env_local_rank) {
  const int ws = rt.world_size;
  if (auto l = rt.backend ? rt.backend->layout() : std::nullopt) {
    rt.local_rank = l->local_rank;
    rt.nproc_per_node = l->nproc_per_node;
    rt.node_rank = l->node_rank;
    rt.nnodes = l->nnodes;
    return;
  }
  std::optional<int> local = env_local_rank ? env_local_rank : rt.local_rank_hint;
  std::optional<int> nproc = get_env_int("LOCAL_WORLD_SIZE");
  std::optional<int> node_rank;
  if (ws == 1) {
    // One process: its local rank may name a device other than 0 (set_local_rank(5) on a
    // one-rank group uses GPU 5), but the node runs one process of this job, as idist says.
    rt.local_rank = local.value_or(0);
    rt.nproc_per_node = 1;
    rt.nnodes = 1;
    rt.node_rank = 0;
    return;
  }
  KINDLING_CHECK(!nproc || *nproc <= ws, "kindling::dist::initialize: LOCAL_WORLD_SIZE=", nproc.value_or(0),
                 " is larger than the world size ", ws,
                 ": a node cannot run more of this job's processes than the job has; check LOCAL_WORLD_SIZE");
  if (!local || !nproc) {
    const auto peers = exchange_layout(rt, local.value_or(-1));
    if (!local) {
      for (const auto& p : peers)
        KINDLING_CHECK(!p.first.empty(), "kindling::dist::initialize: LOCAL_RANK is not set and a rank of this "
                       "job is not a kindling process (a plain torch.distributed peer), so the node layout cannot "
                       "be worked out from host names; set LOCAL_RANK (and LOCAL_WORLD_SIZE) for every rank");
      std::vector<std::string> order;
      std::map<std::string, int> count;
      for (const auto& p : peers) {
        if (!count.count(p.first)) order.push_back(p.first);
        ++count[p.first];
      }
      int before = 0;
      for (std::size_t n = 0; n < order.size(); ++n) {
        if (order[n] == peers[static_cast<std::size_t>(rt.rank)].first) {
          local = rt.rank - before;
          node_rank = static_cast<int>(n);
          if (!nproc) nproc = count[order[n]];
          break;
        }
        before += count[order[n]];
      }
      KINDLING_CHECK(local && *local >= 0,
                     "kindling::dist::initialize: failed to estimate the local rank from host names;"
                     " set LOCAL_RANK (and LOCAL_WORLD_SIZE) in every rank's environment");
    }
    if (!nproc) {
      int largest = 0;
      for (const auto& p : peers) largest = std::max(largest, p.second + 1);
      nproc = largest;
    }
  }
  KINDLING_CHECK(*nproc >= 1 && *local < *nproc, "kindling::dist::initialize: LOCAL_RANK=", *local,
                 " is not smaller than the number of processes per node (", *nproc,
                 "); check LOCAL_RANK / LOCAL_WORLD_SIZE");
  rt.local_rank = *local;
  rt.nproc_per_node = *nproc;
  rt.nnodes = std::max(1, ws / *nproc);
  if (ws % *nproc != 0) {
    log(LogLevel::kWarning, "kindling::dist: warning: world size " + std::to_string(ws) + " is not a multiple of " +
                                std::to_string(*nproc) +
                                " processes per node; kindling assumes equal nodes, so node counts are approximate");
  }
  if (!node_rank) {
    node_rank = get_env_int("GROUP_RANK");
    if (!node_rank) node_rank = rt.rank / *nproc;
  }
  rt.node_rank = *node_rank;
}

void publish_environment(const detail::WorldConfig& cfg, const LaunchEnvironment& launch) {
  std::vector<std::pair<std::string, std::string>> values;
  if (const auto round = detail::entered_round())
    values = detail::entered_round_variables(*round, cfg.local_rank.value_or(0), launch.local_world_size.value_or(1));
  values.emplace_back("RANK", std::to_string(cfg.rank));
  values.emplace_back("WORLD_SIZE", std::to_string(cfg.world_size));
  if (cfg.local_rank) values.emplace_back("LOCAL_RANK", std::to_string(*cfg.local_rank));
  if (launch.local_world_size) values.emplace_back("LOCAL_WORLD_SIZE", std::to_string(*launch.local_world_size));
  if (launch.node_rank) values.emplace_back("GROUP_RANK", std::to_string(*launch.node_rank));
  if (!cfg.master_addr.empty()) {
    values.emplace_back("MASTER_ADDR", cfg.master_addr);
    values.emplace_back("MASTER_PORT", std::to_string(cfg.master_port));
  }
  ::kindling::detail::set_envs(values);
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
