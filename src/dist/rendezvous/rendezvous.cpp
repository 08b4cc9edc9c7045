#include "dist/rendezvous/rendezvous.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/env.h"
#include "dist/base/engine_error.h"
#include "dist/rendezvous/probe.h"
#include "dist/rendezvous/store_client.h"
#include "kindling/detail/torch_compat.h"
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

// Whether torchrun's agent hosts the store at host:port, so that every rank is a client:
// TORCHELASTIC_USE_AGENT_STORE=True promises a store at the agent's own MASTER_ADDR:MASTER_PORT
// only (as torch.distributed 2.15 reads it); a store elsewhere (tcp:// of the user's choosing)
// is hosted by rank 0 as without torchrun.
bool uses_agent_store(const std::string& host, int port) {
  return get_env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True" &&
         get_env("MASTER_ADDR").value_or("") == host && get_env("MASTER_PORT").value_or("") == std::to_string(port);
}

// The agent store's keys of this attempt. Up to LibTorch 2.5, torchrun kept one agent store for
// all restarts and each restart's keys under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>";
// from 2.6 on the agent makes a new store per restart and torch.distributed adds no prefix.
// kindling must do what the Python ranks of its own LibTorch version do, or a mixed
// C++/Python job under torchrun waits for keys the others never write (seen with 2.15).
// torchrun's own rule, not c10d's: hence kindling/detail/torch_compat.h, not backends/c10d/c10d_compat.h.
c10::intrusive_ptr<c10d::Store> agent_prefixed(c10::intrusive_ptr<c10d::Store> store, const std::string& host,
                                               int port) {
#if KINDLING_TORCH_AGENT_STORE_PER_RESTART
  (void)host, (void)port;
  return store;
#else
  if (!uses_agent_store(host, port)) return store;
  const std::string attempt = get_env("TORCHELASTIC_RESTART_COUNT").value_or("0");
  return c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + attempt, std::move(store));
#endif
}

// Each store a kindling rank 0 hosts gets a random generation, so that a rank that
// initializes again on the same address can tell its previous store (whose host has not
// finalized yet) from the next one.
const char* const kGenerationKey = "kindling/store_generation";

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string new_generation() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return std::to_string(rng());
}

// The generation of the store this process last joined at each address ("host:port").
std::mutex joined_mu;
std::map<std::string, std::string> joined_generations;

// Reads `store`'s generation ("" when it has none); throws what c10d throws.
std::string generation_of(c10d::Store& store) {
  // A store hosted by Python, or by kindling before it wrote the key, has none yet.
  if (!store.check({kGenerationKey})) return "";
  const auto raw = store.get(kGenerationKey);
  return std::string(raw.begin(), raw.end());
}

// True when `store` is the one this process last joined at `where` (same generation).
// Never throws: a store that cannot be read counts as the previous one (it is going away),
// and `failure` says why. A store without a generation counts as new: rank 0 writes it just
// after it starts listening, so a rank may join before it is there; remember_store_generation
// records it once the rendezvous is done.
bool is_previous_store(c10d::Store& store, const std::string& where, std::string& failure) {
  std::string generation;
  try {
    generation = generation_of(store);
  } catch (const std::exception& e) {
    failure = engine_message(e);
    return true;
  }
  if (generation.empty()) return false;
  std::lock_guard<std::mutex> lock(joined_mu);
  auto it = joined_generations.find(where);
  if (it != joined_generations.end() && it->second == generation) return true;
  joined_generations[where] = generation;
  return false;
}

// Whether c10d's message says that the store closed the connection. LibTorch 1.13 passes
// the system's words on ("Connection reset by peer", "Broken pipe"); 2.x has its own
// ("Failed to recv, got 0 bytes. Connection was likely closed", "Connection closed by
// peer", "Remote peer closed the connection"), seen when a rank joins while the previous
// store's host finalizes.
bool connection_closed(std::string msg) {
  std::transform(msg.begin(), msg.end(), msg.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* words :
       {"reset by peer", "broken pipe", "connection was likely closed", "closed by peer", "closed the connection"}) {
    if (msg.find(words) != std::string::npos) return true;
  }
  return false;
}

// Connects a client to the store at host:port (see the definition); null when the store
// closed the connection while this rank joined (it is going away: try again), and
// `failure` says how.
c10::intrusive_ptr<c10d::Store> join_store(const std::string& host, int port, const c10d::TCPStoreOptions& opts,
                                           const WorldConfig& config, std::chrono::steady_clock::time_point deadline,
                                           std::string& failure);

c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, int port, const WorldConfig& config) {
  using ::kindling::detail::rank_prefix;
  const std::string where = host + ":" + std::to_string(port);
  check_resolvable(host, host_label(config), std::min<std::chrono::milliseconds>(config.timeout, std::chrono::seconds(30)));
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = !uses_agent_store(host, port) && config.rank == 0;
  opts.numWorkers = static_cast<std::size_t>(config.world_size);
  // Clients add themselves to the server's "init/" counter, which a Python-hosted server
  // waits for; a kindling-hosted server does not block (the store-based barrier that
  // follows names the ranks that are missing instead).
  opts.waitWorkers = !opts.isServer;
  opts.multiTenant = true;
  opts.timeout = config.timeout;
  if (opts.isServer) {
    try {
      auto server = c10::make_intrusive<c10d::TCPStore>(host, opts);
      server->set(kGenerationKey, to_bytes(new_generation()));
      return agent_prefixed(server, host, port);
    } catch (const std::exception& e) {
      throw UsageError(rank_prefix() + "kindling::dist::initialize: rank 0 could not host the rendezvous store on port " +
                       std::to_string(port) + ": " + engine_message(e) +
                       ". Another job may use this port: choose a free MASTER_PORT (or tcp:// port).");
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  for (;;) {
    std::string failure;
    auto store = join_store(host, port, opts, config, deadline, failure);
    // The previous store at this address, whose host has not finalized yet: wait for its
    // successor instead of joining a rendezvous that is about to go away.
    if (store && !is_previous_store(*store, where, failure)) return agent_prefixed(store, host, port);
    store.reset();
    if (std::chrono::steady_clock::now() >= deadline && !failure.empty()) {
      throw CommunicationError(rank_prefix() + "kindling::dist::initialize: the rendezvous store at " + where +
                               " closed the connection each time this rank joined, for " +
                               std::to_string(config.timeout.count()) + " ms (last: " + failure +
                               "). Rank 0 (or the launcher's agent) hosts it and is probably failing or exiting: "
                               "check its output.");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError(rank_prefix() + "kindling::dist::initialize: the rendezvous store at " + where +
                         " is still the one of this rank's previous initialize() after " +
                         std::to_string(config.timeout.count()) +
                         " ms: rank 0 did not finalize() and initialize() again. Every rank must finalize() before "
                         "initializing again.");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Connects this rank (a client) to the store at host:port: waits for a listener (rank 0 may
// start later), then connects, bounded: c10d's client never times out a read, so a port
// held by some other program would otherwise block this rank for ever.
c10::intrusive_ptr<c10d::Store> join_store(const std::string& host, int port, const c10d::TCPStoreOptions& opts,
                                           const WorldConfig& config, std::chrono::steady_clock::time_point deadline,
                                           std::string& failure) {
  using ::kindling::detail::rank_prefix;
  const std::string where = host + ":" + std::to_string(port);
  // A host that does not answer at all for the stall period (the timeout when stall
  // detection is off) is gone or cut off: said at once rather than after the whole timeout.
  const auto silent_limit = config.stall_period.count() > 0 ? config.stall_period : config.timeout;
  if (!wait_for_listener(host, port, deadline, silent_limit, config.given_up.get())) {
    throw TimeoutError(rank_prefix() + "kindling::dist::initialize: nothing accepted connections at " + where +
                       " within " + std::to_string(config.timeout.count()) +
                       " ms, so the rendezvous store never started. Check that rank 0 is running and that "
                       "MASTER_ADDR/MASTER_PORT (or the tcp:// address) are the same on every rank.");
  }
  auto slot = std::make_shared<c10::intrusive_ptr<c10d::Store>>();
  const auto answer_limit = std::min<std::chrono::milliseconds>(config.timeout, std::chrono::seconds(10));
  bool answered = false;
  try {
    answered = run_bounded([slot, host, opts] { *slot = open_store_client(host, opts); },
                           answer_limit);
  } catch (const std::exception& e) {
    // A store that closes the connection while this rank joins is going away (the
    // previous initialize's, its host finalizing): the next one will listen there soon.
    const std::string msg = engine_message(e);
    if (connection_closed(msg) && std::chrono::steady_clock::now() < deadline) {
      failure = msg;
      return {};
    }
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
  return *slot;
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

void remember_store_generation(const WorldConfig& config, const c10::intrusive_ptr<c10d::Store>& store) {
  const std::string& m = config.init_method;
  if (!starts_with(m, "env://") && !starts_with(m, "tcp://")) return;
  c10::intrusive_ptr<c10d::Store> raw = store;
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(raw.get())) raw = prefixed->getUnderlyingStore();
  std::string generation;
  try {
    generation = generation_of(*raw);
  } catch (const std::exception&) {
    return;  // the store's host is gone: no later store at this address can be taken for it
  }
  if (generation.empty()) return;
  std::lock_guard<std::mutex> lock(joined_mu);
  joined_generations[config.master_addr + ":" + std::to_string(config.master_port)] = generation;
}

std::string store_place(const WorldConfig& config) {
  if (starts_with(config.init_method, "file://")) return "the file store '" + config.init_method.substr(7) + "'";
  const std::string where = config.master_addr + ":" + std::to_string(config.master_port);
  if (uses_agent_store(config.master_addr, config.master_port)) return "torchrun's agent store at " + where;
  return "the rendezvous store at " + where;
}

MonitorTarget connect_monitor_store(const WorldConfig& config) {
  // A file store has no connection that could block; the caller shares its own.
  if (starts_with(config.init_method, "file://")) {
    MonitorTarget shared;
    shared.host = store_place(config);
    return shared;
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(config.master_port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = config.timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = open_store_client(config.master_addr, opts);
  } catch (const std::exception& e) {
    throw CommunicationError(::kindling::detail::rank_prefix() +
                             "kindling::dist::initialize: could not open a second connection to the rendezvous store "
                             "for the stall monitor: " + engine_message(e));
  }
  store = c10::make_intrusive<c10d::PrefixStore>("default_pg",
                                                 agent_prefixed(store, config.master_addr, config.master_port));
  return {store, uses_agent_store(config.master_addr, config.master_port) ? -1 : 0, store_place(config)};
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
