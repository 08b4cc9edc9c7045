#pragma once
// The Backend of the engines kindling reaches through LibTorch's c10d (gloo, nccl): group
// creation in torch.distributed's order and store layout, so that kindling and Python ranks
// can form one job.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/backends/backend.h"
#include "dist/backends/backend_traits.h"
#include "dist/backends/c10d/c10d_communicator.h"
#include "dist/base/world_config.h"
#include "dist/rendezvous/startup_board.h"

namespace kindling {
namespace dist {
namespace detail {

/// Group creation mirrors torch.distributed: the world's process group lives under the
/// store prefix "0", the k-th new_group under "<k>"; after each creation every rank of the
/// world passes the store-based barrier (for the world only where the LibTorch version's
/// Python does, c10d_compat.h), then the members agree on a sequence number.
class C10dBackend : public Backend {
 public:
  /// `flags`: the traits' (backend_traits.h), given to every communicator.
  C10dBackend(std::string name, C10dEngineFlags flags, c10::intrusive_ptr<c10d::Store> store, int rank,
              int world_size, std::chrono::milliseconds timeout, ProcessGroupFactory factory);

  /// Creates the world group through the factory (collective over all ranks).
  void create_world();
  /// Uses a process group made elsewhere as the world (kindling/dist/c10d.h).
  void adopt_world(c10::intrusive_ptr<c10d::ProcessGroup> pg);

  std::string name() const override { return name_; }
  std::shared_ptr<Communicator> world() override { return world_; }
  c10::intrusive_ptr<c10d::Store> store() override { return store_; }
  std::shared_ptr<Communicator> create_group(int group_index, const std::vector<int>& ranks, int group_rank) override;
  /// Who hosts the store ("the rendezvous store at node0:29500", rendezvous.h's
  /// store_place), named when a rank stays blocked in the rendezvous, and its TCP port (-1:
  /// a file store), which an engine's message names for the store rather than a lost peer.
  /// Call before create_world.
  void set_store_place(std::string place, int port) {
    store_place_ = std::move(place);
    store_port_ = port;
  }
  /// The stall monitor's own store connection (rendezvous.h); without one it uses store().
  void set_monitor_target(MonitorTarget target) { monitor_ = std::move(target); }
  MonitorTarget monitor_target() override { return monitor_.store ? monitor_ : Backend::monitor_target(); }
  /// The board on which the world's creation claims this rank and watches for another rank's
  /// failure (startup_board.h). Call before create_world.
  void set_startup_board(std::shared_ptr<StartupBoard> board) { board_ = std::move(board); }
  /// WorldConfig::given_up: once set, the world's creation is left behind and its watchdog
  /// stands down. Call before create_world.
  void set_given_up(std::shared_ptr<std::atomic<bool>> given_up) { given_up_ = std::move(given_up); }

 private:
  // create_group's work; a store failure leaves it as a std::exception.
  std::shared_ptr<Communicator> join_group(int group_index, int size, int group_rank, const std::string& what);

  MonitorTarget monitor_;
  std::shared_ptr<StartupBoard> board_;
  std::shared_ptr<std::atomic<bool>> given_up_;
  std::string store_place_;
  int store_port_ = -1;
  std::string name_;
  C10dEngineFlags flags_;
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_size_;
  std::chrono::milliseconds timeout_;
  ProcessGroupFactory factory_;
  std::shared_ptr<Communicator> world_;
};

/// The start every c10d engine shares, for the backend of `traits` (its name, what the
/// communicators ask): connects to `config`'s store and opens the second
/// connection, calls `prepare` for the engine's factory (where it checks its own settings,
/// e.g. gloo's interface), and creates the world with a startup board, so that a failure of
/// this rank while starting (thrown by `prepare` or the world's creation) reaches every other
/// rank within a second, and theirs reaches this one. `monitor`: the second connection also
/// serves the stall monitor. Collective over the world; throws what the steps throw.
std::unique_ptr<C10dBackend> start_c10d_world(const BackendTraits& traits, const WorldConfig& config, bool monitor,
                                              const std::function<ProcessGroupFactory()>& prepare);

/// Wraps a process group a user made with c10d (kindling/dist/c10d.h) as the world of a
/// backend called `name`, of `traits` (the registry's for that name; null where kindling does
/// not know it): new_group makes groups with the traits' adopted_groups (refused with a
/// kindling::UsageError where there are none, or without a store).
/// Called by sync() on every rank; never throws itself.
std::unique_ptr<Backend> adopt_c10d_group(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                          c10::intrusive_ptr<c10d::Store> store, const BackendTraits* traits,
                                          const std::string& name, std::chrono::milliseconds timeout);

/// Python torch.distributed's store-based barrier after creating group `group_index`
/// (0 = world): every rank adds 1 to the version's barrier key (c10d_compat.h), the rank
/// that completes the count sets "<key>:last_worker", all wait until the count equals
/// `world_size`. kindling also sets "kindling/arrived/<group_index + 1>/<rank>" so that a
/// timeout can name the ranks that are missing. Throws kindling::TimeoutError.
void store_based_barrier(c10d::Store& store, int group_index, int rank, int world_size,
                         std::chrono::milliseconds timeout, const std::string& what);

/// "kindling/joined/<group_index + 1>/<rank>": set by a kindling rank when it joins group
/// `group_index` (0 = world), to its place (rendezvous/peers.h: host name and addresses); a
/// plain torch.distributed peer never sets it.
std::string joined_key(int group_index, int rank);

/// Names the ranks in [0, world_size) that did not set "kindling/joined/<group_index + 1>/<rank>".
/// Never throws (says when the store cannot be read).
std::string missing_joiners(c10d::Store& store, int group_index, int world_size);

/// Reads every rank's place from its joined key of the world and records it (peers.h), for
/// the errors that name a peer by its address. Never throws. Every rank calls it when it has
/// joined (`fresh`: what an earlier world left is dropped), once the world exists, and when
/// making it failed (a read cut short by the store's host ending keeps what was known).
void record_world_places(c10d::Store& store, int world_size, bool fresh = false);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
