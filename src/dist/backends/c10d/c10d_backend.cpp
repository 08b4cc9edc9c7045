#include "dist/backends/c10d/c10d_backend.h"

#include <optional>
#include <thread>

#include "launch/watchdog.h"
#include "dist/backends/c10d/abandonable_store.h"
#include "dist/backends/c10d/c10d_communicator.h"
#include "dist/backends/c10d/c10d_compat.h"
#include "dist/rendezvous/peers.h"
#include "dist/rendezvous/rendezvous.h"
#include "kindling/dist/launch_env.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
using ::kindling::detail::Watchdog;
using ::kindling::detail::watchdog_limit;

namespace {

// What the adapter does differently for the backend (none known: an adopted group of an engine
// without traits).
C10dEngineFlags engine_flags(const BackendTraits* traits) {
  C10dEngineFlags flags;
  if (traits == nullptr) return flags;
  flags.widens_missing_dtypes = traits->widens_missing_dtypes;
  flags.native_chunk_collectives = traits->native_chunk_collectives;
  flags.message_waits_may_time_out = traits->message_waits_may_time_out;
  return flags;
}

}  // namespace

std::string joined_key(int group_index, int rank) {
  return "kindling/joined/" + std::to_string(group_index + 1) + "/" + std::to_string(rank);
}

C10dBackend::C10dBackend(std::string name, C10dEngineFlags flags, c10::intrusive_ptr<c10d::Store> store, int rank,
                         int world_size, std::chrono::milliseconds timeout, ProcessGroupFactory factory)
    : name_(std::move(name)),
      flags_(flags),
      store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      timeout_(timeout),
      factory_(std::move(factory)) {}

void C10dBackend::create_world() { world_ = create_group(0, {}, rank_); }

std::unique_ptr<C10dBackend> start_c10d_world(const BackendTraits& traits, const WorldConfig& config, bool monitor,
                                              const std::function<ProcessGroupFactory()>& prepare) {
  const auto joined = connect_store(config);
  // A world that live recovery may give up waits in a store that ends its waits then.
  c10::intrusive_ptr<c10d::Store> store = joined;
  if (config.given_up) store = c10::make_intrusive<AbandonableStore>(joined, config.given_up);
  auto target = connect_monitor_store(config);
  const std::string place = own_place();
  // A file store has no second connection: its board is not watched (another thread's reads
  // could wait on the main thread's), and the stall monitor shares the store.
  const std::string origin =
      "this process is rank " + std::to_string(config.rank) + " of " + std::to_string(config.world_size) +
      " because of the launcher's variables (launcher: " + config.launcher + "; " + config.launch_variables +
      "). If no such launcher started it, they are left over in the shell: unset them (the launcher's variables win "
      "over --nproc_per_node). Else the other ranks have not started or cannot reach the store";
  auto board = std::make_shared<StartupBoard>(store, target.store, config.rank, config.world_size, place, origin);
  if (!target.store) target.store = store;
  std::unique_ptr<C10dBackend> backend;
  try {
    backend = std::make_unique<C10dBackend>(traits.name, engine_flags(&traits), store, config.rank,
                                            config.world_size, config.timeout, prepare());
    backend->set_store_place(store_place(config), config.init_method.rfind("file://", 0) == 0 ? -1 : config.master_port);
    backend->set_startup_board(board);
    backend->set_given_up(config.given_up);
    backend->create_world();
    remember_store_generation(config, joined);
  } catch (const std::exception& e) {
    // A world given up (live recovery took a newer round) fails for nobody: its ranks left.
    if (config.given_up && config.given_up->load()) throw;
    record_error(e);  // before the board's wait: this rank's failure comes first in the summary
    board->publish_failure("rank " + std::to_string(config.rank) + " on host " + place.substr(0, place.find(' ')) +
                           " failed while starting: " + e.what());
    throw;
  }
  if (monitor) backend->set_monitor_target(std::move(target));
  return backend;
}

void C10dBackend::adopt_world(c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  world_ = std::make_shared<C10dCommunicator>(std::move(pg), flags_, /*owned=*/false);
}

std::unique_ptr<Backend> adopt_c10d_group(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                          c10::intrusive_ptr<c10d::Store> store, const BackendTraits* traits,
                                          const std::string& name, std::chrono::milliseconds timeout) {
  const int rank = pg->getRank();
  const int size = pg->getSize();
  ProcessGroupFactory factory;
  if (traits != nullptr && traits->adopted_groups) {
    factory = traits->adopted_groups(timeout);
  } else {
    factory = [name](c10::intrusive_ptr<c10d::Store>, int, int,
                     const std::string&) -> c10::intrusive_ptr<c10d::ProcessGroup> {
      KINDLING_CHECK(false, "kindling::dist::new_group: cannot create groups for an external '", name,
                     "' process group");
      return {};
    };
  }
  auto backend = std::make_unique<C10dBackend>(name, engine_flags(traits), std::move(store),
                                               rank, size, timeout, std::move(factory));
  backend->adopt_world(std::move(pg));
  return backend;
}

std::shared_ptr<Communicator> C10dBackend::create_group(int group_index, const std::vector<int>& ranks,
                                                        int group_rank) {
  KINDLING_CHECK(store_,
                 "kindling::dist::new_group: the process group handed to kindling came without a store, "
                 "so kindling cannot create new groups; pass the store to use_process_group()");
  const int size = group_index == 0 ? world_size_ : static_cast<int>(ranks.size());
  const std::string what = group_index == 0 ? std::string("kindling::dist::initialize (") + name_ + " rendezvous)"
                                            : "kindling::dist::new_group #" + std::to_string(group_index);
  try {
    return join_group(group_index, size, group_rank, what);
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    // The store itself failed: its host (rank 0, or torchrun's agent) closed or reset the
    // connection, most often because it exited.
    throw CommunicationError(::kindling::detail::rank_prefix() + what +
                             ": the rendezvous store failed: " + engine_message(e) +
                             ". The process that hosts it (rank 0, or the launcher's agent) has probably exited or "
                             "failed: check its output.");
  }
}

namespace {
std::string arrived_key(int group_index, int rank) {
  return "kindling/arrived/" + std::to_string(group_index + 1) + "/" + std::to_string(rank);
}

// Ranks in [0, world_size) without `key(rank)` in the store, "none", or why the store
// could not be read.
template <typename Key>
std::string ranks_without(c10d::Store& store, int world_size, Key key) {
  std::string out;
  try {
    for (int r = 0; r < world_size; ++r) {
      if (!store.check({key(r)})) out += (out.empty() ? "" : ", ") + std::to_string(r) + on_host(r);
    }
  } catch (const std::exception& e) {
    return std::string("unknown (the store could not be read: ") + e.what() + ")";
  }
  return out.empty() ? std::string("none") : out;
}

// What join_group's watchdog adds when a step outlives its limit: who has not joined and
// who joined but did not arrive, read from the store (the watchdog gives up on a store that
// does not answer).
std::string blocked_join_diagnosis(c10d::Store& store, int group_index, int world_size) {
  if (group_index == 0) record_world_places(store, world_size);
  return "Ranks that have not joined: " + missing_joiners(store, group_index, world_size) +
         "; ranks that joined but have not connected to the others yet: " +
         ranks_without(store, world_size, [group_index](int r) { return arrived_key(group_index, r); }) + ".";
}
}  // namespace

std::shared_ptr<Communicator> C10dBackend::join_group(int group_index, int size, int group_rank,
                                                      const std::string& what) {
  std::shared_ptr<C10dCommunicator> comm;
  // The engine's waits below should end by the timeout; where one does not (c10d's store
  // client and gloo on LibTorch 2.x, a host cut off during the rendezvous), the watchdog
  // ends the rank rather than letting it hang.
  const std::string through = " through " + (store_place_.empty() ? std::string("the rendezvous store") : store_place_);
  Watchdog::Verdict verdict;
  verdict.what = what;
  verdict.cause = "The engine is blocked past its own timeout (" + std::to_string(timeout_.count()) +
                  " ms) and cannot be interrupted. Check that every host is up and reaches the others (a cut "
                  "link or a stopped process leaves a rank waiting).";
  verdict.diagnose = [store = store_, group_index, size = world_size_] {
    return blocked_join_diagnosis(*store, group_index, size);
  };
  if (board_ && group_index == 0) verdict.poll = [board = board_] { return board->watch(); };
  if (board_ && group_index == 0) verdict.note = [board = board_] { return board->origin(); };
  if (given_up_) verdict.stand_down = [given_up = given_up_] { return given_up->load(); };
  Watchdog watchdog(std::move(verdict), "connecting to the other ranks" + through, watchdog_limit(timeout_));
  // Announce this rank, with where it runs, first: a timeout anywhere below can then name
  // who is missing, and an engine's message about an address whose rank that is.
  if (board_ && group_index == 0) board_->claim();
  const std::string place = own_place();
  store_->set(joined_key(group_index, rank_), std::vector<uint8_t>(place.begin(), place.end()));
  // Where the ranks that joined before run, while the store's host is surely up: a failure
  // below can still name the host behind an address after that host (rank 0) has ended.
  if (group_index == 0) record_world_places(*store_, world_size_, /*fresh=*/true);
  if (group_rank >= 0) {
    const std::string group_name = std::to_string(group_index);
    auto pg_store = group_store(store_, group_name);
    try {
      comm = std::make_shared<C10dCommunicator>(factory_(pg_store, group_rank, size, group_name), flags_);
    } catch (const kindling::Error&) {
      throw;
    } catch (const std::exception& e) {
      if (given_up_ && given_up_->load()) throw;  // nobody waits for this world's messages
      const std::string message = engine_message(e);
      if (group_index == 0) record_world_places(*store_, world_size_);
      const std::string at = ranks_behind_addresses(message, store_port_);
      throw TimeoutError(::kindling::detail::rank_prefix() + what +
                         ": connecting to the other ranks failed (rendezvous timeout " +
                         std::to_string(timeout_.count()) + " ms): " + message + (at.empty() ? "" : " (" + at + ")") +
                         ". Ranks that have not joined yet: " + missing_joiners(*store_, group_index, world_size_) +
                         ". Start every rank with the same WORLD_SIZE and rendezvous address, and check that the "
                         "hosts reach each other.");
    }
  }
  if (group_index == 0) record_world_places(*store_, world_size_);
  if (group_index != 0 || world_store_barrier()) {
    watchdog.step("waiting for every rank to arrive" + through);
    store_based_barrier(*store_, group_index, rank_, world_size_, timeout_, what);
  }
  if (comm) start_sequence_numbers(*comm->process_group());
  return comm;
}

void record_world_places(c10d::Store& store, int world_size, bool fresh) {
  std::vector<std::optional<std::string>> places(static_cast<std::size_t>(world_size));
  bool complete = true;
  try {
    for (int r = 0; r < world_size; ++r) {
      const std::string key = joined_key(0, r);
      if (!store.check({key})) continue;
      const auto raw = store.get(key);
      places[static_cast<std::size_t>(r)] = std::string(raw.begin(), raw.end());
    }
  } catch (const std::exception&) {
    // The store's host is gone (it may end before the others report): what this read and
    // the earlier one of this world found is all there is to name.
    complete = false;
  }
  record_places(places, /*keep_known=*/!fresh && !complete);
}

std::string missing_joiners(c10d::Store& store, int group_index, int world_size) {
  return ranks_without(store, world_size, [group_index](int r) { return joined_key(group_index, r); });
}

void store_based_barrier(c10d::Store& store, int group_index, int rank, int world_size,
                         std::chrono::milliseconds timeout, const std::string& what) {
  const std::string key = store_barrier_key(group_index);
  store.set(arrived_key(group_index, rank), std::vector<uint8_t>{'1'});
  // A Python 2.x rank waits for "<key>:last_worker", set by whoever completes the count.
  if (store.add(key, 1) == world_size) store.set(key + ":last_worker", std::vector<uint8_t>{'1'});
  const auto start = std::chrono::steady_clock::now();
  auto delay = std::chrono::microseconds(200);
  int64_t count = 0;
  while ((count = store.add(key, 0)) < world_size) {
    if (std::chrono::steady_clock::now() - start > timeout) {
      throw TimeoutError(
          ::kindling::detail::rank_prefix() + what + ": timed out after " + std::to_string(timeout.count()) +
          " ms waiting for all ranks: " + std::to_string(count) + " of " + std::to_string(world_size) +
          " arrived; kindling ranks that did not arrive: " +
          ranks_without(store, world_size, [group_index](int r) { return arrived_key(group_index, r); }) +
          " (not joined at all: " + missing_joiners(store, group_index, world_size) +
          "; a rank that joined but did not arrive could not connect to the others). Start every "
          "rank with the same WORLD_SIZE and rendezvous address, or raise the timeout.");
    }
    std::this_thread::sleep_for(delay);
    if (delay < std::chrono::milliseconds(10)) delay *= 2;
  }
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
