// initialize()'s helpers: the tcp:// init_method's address and the node layout; see layout.h.
#include "dist/layout.h"

#include <algorithm>
#include <map>
#include <vector>

#include "common/env.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"

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
    local = local.value_or(0);
    nproc = 1;
  } else if (!local) {
    auto hosts = all_gather(hostname());
    std::vector<std::string> order;
    std::map<std::string, int> count;
    for (const auto& h : hosts) {
      if (!count.count(h)) order.push_back(h);
      ++count[h];
    }
    int before = 0;
    for (std::size_t n = 0; n < order.size(); ++n) {
      if (order[n] == hosts[static_cast<std::size_t>(rt.rank)]) {
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
  if (!nproc) nproc = all_reduce(*local + 1, ReduceOp::kMax);
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

}  // namespace detail
}  // namespace dist
}  // namespace kindling
