#include "dist/backends/gloo/gloo_backend.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "common/env.h"
#include "dist/backends/c10d/c10d_communicator.h"
#include "dist/rendezvous/rendezvous.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {
using ::kindling::detail::get_env;

// Group creation mirrors torch.distributed (1.13): the world's process group lives under
// the store prefix "0", the k-th new_group under "<k>"; after each creation every rank of
// the world passes the store-based barrier number k + 1, then the members agree on a
// sequence number. Doing the same steps in the same order is what lets a Python rank and
// a kindling rank form one job.
class C10dBackend : public Backend {
 public:
  using Factory = std::function<c10::intrusive_ptr<c10d::ProcessGroup>(c10::intrusive_ptr<c10d::Store>, int, int)>;

  C10dBackend(std::string name, c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
              std::chrono::milliseconds timeout, Factory factory)
      : name_(std::move(name)), store_(std::move(store)), rank_(rank), world_size_(world_size),
        timeout_(timeout), factory_(std::move(factory)) {}

  void create_world() { world_ = create_group(0, {}, rank_); }
  void adopt_world(c10::intrusive_ptr<c10d::ProcessGroup> pg) { world_ = std::make_shared<C10dCommunicator>(pg); }

  std::string name() const override { return name_; }
  std::shared_ptr<Communicator> world() override { return world_; }
  c10::intrusive_ptr<c10d::Store> store() override { return store_; }

  std::shared_ptr<Communicator> create_group(int group_index, const std::vector<int>& ranks,
                                             int group_rank) override {
    KINDLING_CHECK(store_, "kindling::dist::new_group: the process group handed to kindling came without a store, "
                           "so kindling cannot create new groups; pass the store to use_process_group()");
    const int size = group_index == 0 ? world_size_ : static_cast<int>(ranks.size());
    std::shared_ptr<C10dCommunicator> comm;
    const std::string what = group_index == 0 ? std::string("kindling::dist::initialize (") + name_ + " rendezvous)"
                                              : "kindling::dist::new_group #" + std::to_string(group_index);
    // Announce this rank first, so that a timeout anywhere below can name who is missing.
    store_->set("kindling/joined/" + std::to_string(group_index + 1) + "/" + std::to_string(rank_),
                std::vector<uint8_t>{'1'});
    if (group_rank >= 0) {
      auto pg_store = c10::make_intrusive<c10d::PrefixStore>(std::to_string(group_index), store_);
      try {
        comm = std::make_shared<C10dCommunicator>(factory_(pg_store, group_rank, size));
      } catch (const kindling::Error&) {
        throw;
      } catch (const std::exception& e) {
        throw TimeoutError(::kindling::detail::rank_prefix() + what + ": connecting to the other ranks failed within " +
                           std::to_string(timeout_.count()) + " ms: " + engine_message(e) +
                           " Ranks that have not joined yet: " + missing_joiners(*store_, group_index + 1, world_size_) +
                           ". Start every rank with the same WORLD_SIZE and rendezvous address.");
      }
    }
    store_based_barrier(*store_, group_index + 1, rank_, world_size_, timeout_, what);
    if (comm) comm->process_group()->setSequenceNumberForGroup();
    return comm;
  }

 private:
  std::string name_;
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_size_;
  std::chrono::milliseconds timeout_;
  Factory factory_;
  std::shared_ptr<Communicator> world_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const WorldConfig& config) {
  auto store = connect_store(config);
  const auto timeout = config.timeout;
  const int threads = config.gloo_threads;
  auto factory = [timeout, threads](c10::intrusive_ptr<c10d::Store> s, int rank, int size) {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    // Same device choice as Python: GLOO_SOCKET_IFNAME if set, else the host name's address.
    if (auto ifname = get_env("GLOO_SOCKET_IFNAME")) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*ifname));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    opts->threads = threads;
    return c10::intrusive_ptr<c10d::ProcessGroup>(c10::make_intrusive<c10d::ProcessGroupGloo>(s, rank, size, opts));
  };
  auto backend = std::make_unique<C10dBackend>("gloo", store, config.rank, config.world_size, config.timeout,
                                               std::move(factory));
  backend->create_world();
  return backend;
}

std::unique_ptr<Backend> make_external_c10d_backend(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                                    c10::intrusive_ptr<c10d::Store> store, std::string name,
                                                    std::chrono::milliseconds timeout) {
  const int rank = pg->getRank();
  const int size = pg->getSize();
  C10dBackend::Factory factory;
  if (name == "gloo") {
    factory = [timeout](c10::intrusive_ptr<c10d::Store> s, int r, int n) {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      return c10::intrusive_ptr<c10d::ProcessGroup>(c10::make_intrusive<c10d::ProcessGroupGloo>(s, r, n, opts));
    };
  } else {
    factory = [name](c10::intrusive_ptr<c10d::Store>, int, int) -> c10::intrusive_ptr<c10d::ProcessGroup> {
      KINDLING_CHECK(false, "kindling::dist::new_group: cannot create groups for an external '", name,
                     "' process group");
      return {};
    };
  }
  auto backend = std::make_unique<C10dBackend>(name, std::move(store), rank, size, timeout, std::move(factory));
  backend->adopt_world(std::move(pg));
  return backend;
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
