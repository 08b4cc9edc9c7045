#include "dist/rendezvous/rendezvous.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/env.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {
using ::kindling::detail::get_env;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, int port, const WorldConfig& config) {
  const bool agent_store = get_env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = !agent_store && config.rank == 0;
  opts.numWorkers = static_cast<std::size_t>(config.world_size);
  // Clients add themselves to the server's "init/" counter, which a Python-hosted server
  // waits for; a kindling-hosted server does not block (the store-based barrier that
  // follows names the ranks that are missing instead).
  opts.waitWorkers = !opts.isServer;
  opts.multiTenant = true;
  opts.timeout = config.timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(host, opts);
  } catch (const std::exception& e) {
    const std::string msg = engine_message(e);
    if (opts.isServer) {
      throw UsageError(::kindling::detail::rank_prefix() +
                       "kindling::dist::initialize: rank 0 could not host the rendezvous store on port " +
                       std::to_string(port) + ": " + msg +
                       ". Another job may use this port: choose a free MASTER_PORT (or tcp:// port).");
    }
    throw TimeoutError(::kindling::detail::rank_prefix() +
                       "kindling::dist::initialize: could not reach the rendezvous store at " + host + ":" +
                       std::to_string(port) + " within " + std::to_string(config.timeout.count()) + " ms (" + msg +
                       "). Check that rank 0 is running and that MASTER_ADDR/MASTER_PORT (or the tcp:// " +
                       "address) are the same on every rank.");
  }
  if (agent_store) {
    const std::string attempt = get_env("TORCHELASTIC_RESTART_COUNT").value_or("0");
    store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + attempt, store);
  }
  return store;
}

}  // namespace

c10::intrusive_ptr<c10d::Store> connect_store(const WorldConfig& config) {
  c10::intrusive_ptr<c10d::Store> store;
  const std::string& m = config.init_method;
  if (starts_with(m, "env://") || starts_with(m, "tcp://")) {
    store = tcp_store(config.master_addr, config.master_port, config);
  } else if (starts_with(m, "file://")) {
    const std::string path = m.substr(std::string("file://").size());
    KINDLING_CHECK(!path.empty(), "kindling::dist::initialize: init_method '", m,
                   "' has no path; use file:///absolute/path/to/a/shared/file");
    store = c10::make_intrusive<c10d::FileStore>(path, config.world_size);
    store->setTimeout(config.timeout);
  } else {
    KINDLING_CHECK(false, "kindling::dist::initialize: unsupported init_method '", m,
                   "'; use 'env://', 'tcp://host:port' or 'file:///path'");
  }
  return c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
