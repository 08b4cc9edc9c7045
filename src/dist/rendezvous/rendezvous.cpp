#include "dist/rendezvous/rendezvous.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <memory>

#include "common/env.h"
#include "dist/rendezvous/probe.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {
using ::kindling::detail::get_env;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string host_label(const WorldConfig& config) {
  return starts_with(config.init_method, "env://") ? std::string("MASTER_ADDR")
                                                   : "the host of init_method '" + config.init_method + "'";
}

bool uses_agent_store() { return get_env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True"; }

// torchrun's agent store keeps each restart's keys under their own prefix.
c10::intrusive_ptr<c10d::Store> agent_prefixed(c10::intrusive_ptr<c10d::Store> store) {
  if (!uses_agent_store()) return store;
  const std::string attempt = get_env("TORCHELASTIC_RESTART_COUNT").value_or("0");
  return c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + attempt, std::move(store));
}

c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, int port, const WorldConfig& config) {
  using ::kindling::detail::rank_prefix;
  const std::string where = host + ":" + std::to_string(port);
  check_resolvable(host, host_label(config), std::min<std::chrono::milliseconds>(config.timeout, std::chrono::seconds(30)));
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = !uses_agent_store() && config.rank == 0;
  opts.numWorkers = static_cast<std::size_t>(config.world_size);
  // Clients add themselves to the server's "init/" counter, which a Python-hosted server
  // waits for; a kindling-hosted server does not block (the store-based barrier that
  // follows names the ranks that are missing instead).
  opts.waitWorkers = !opts.isServer;
  opts.multiTenant = true;
  opts.timeout = config.timeout;
  if (opts.isServer) {
    try {
      return agent_prefixed(c10::make_intrusive<c10d::TCPStore>(host, opts));
    } catch (const std::exception& e) {
      throw UsageError(rank_prefix() + "kindling::dist::initialize: rank 0 could not host the rendezvous store on port " +
                       std::to_string(port) + ": " + engine_message(e) +
                       ". Another job may use this port: choose a free MASTER_PORT (or tcp:// port).");
    }
  }
  // A client: first wait for a listener (rank 0 may start later), then connect, bounded:
  // c10d's client never times out a read, so a port held by some other program would
  // otherwise block this rank for ever.
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  if (!wait_for_listener(host, port, deadline)) {
    throw TimeoutError(rank_prefix() + "kindling::dist::initialize: nothing accepted connections at " + where +
                       " within " + std::to_string(config.timeout.count()) +
                       " ms, so the rendezvous store never started. Check that rank 0 is running and that "
                       "MASTER_ADDR/MASTER_PORT (or the tcp:// address) are the same on every rank.");
  }
  auto slot = std::make_shared<c10::intrusive_ptr<c10d::Store>>();
  const auto answer_limit = std::min<std::chrono::milliseconds>(config.timeout, std::chrono::seconds(10));
  bool answered = false;
  try {
    answered = run_bounded([slot, host, opts] { *slot = c10::make_intrusive<c10d::TCPStore>(host, opts); },
                           answer_limit);
  } catch (const std::exception& e) {
    throw CommunicationError(rank_prefix() + "kindling::dist::initialize: could not join the rendezvous store at " +
                             where + ": " + engine_message(e) +
                             ". Check that rank 0 is running and that MASTER_ADDR/MASTER_PORT (or the tcp:// address) "
                             "are the same on every rank.");
  }
  if (!answered) {
    throw UsageError(rank_prefix() + "kindling::dist::initialize: the program listening at " + where +
                     " accepts connections but did not answer as a rendezvous store within " +
                     std::to_string(answer_limit.count()) +
                     " ms. Another program holds this port (choose a free MASTER_PORT for the job), or rank 0's "
                     "process is stopped.");
  }
  return agent_prefixed(*slot);
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
    check_store_folder(path, m);
    try {
      store = c10::make_intrusive<c10d::FileStore>(path, config.world_size);
    } catch (const std::exception& e) {
      throw CommunicationError(::kindling::detail::rank_prefix() + "kindling::dist::initialize: cannot open the file "
                               "store '" + path + "' of init_method '" + m + "': " + engine_message(e) +
                               ". Check that the file can be created and written by every rank.");
    }
    store->setTimeout(config.timeout);
  } else {
    KINDLING_CHECK(false, "kindling::dist::initialize: unsupported init_method '", m,
                   "'; use 'env://', 'tcp://host:port' or 'file:///path'");
  }
  return c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
}

MonitorTarget connect_monitor_store(const WorldConfig& config) {
  const std::string& m = config.init_method;
  // A file store has no connection that could block; the caller shares its own.
  if (starts_with(m, "file://")) {
    MonitorTarget shared;
    shared.host = "the file store '" + m.substr(7) + "'";
    return shared;
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(config.master_port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = config.timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(config.master_addr, opts);
  } catch (const std::exception& e) {
    throw CommunicationError(::kindling::detail::rank_prefix() +
                             "kindling::dist::initialize: could not open a second connection to the rendezvous store "
                             "for the stall monitor: " + engine_message(e));
  }
  store = c10::make_intrusive<c10d::PrefixStore>("default_pg", agent_prefixed(store));
  const std::string where = config.master_addr + ":" + std::to_string(config.master_port);
  if (uses_agent_store()) return {store, -1, "torchrun's agent store at " + where};
  return {store, 0, "the rendezvous store at " + where};
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
