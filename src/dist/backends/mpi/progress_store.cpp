// The progress store of an mpi job (progress_store.h).
#include "dist/backends/mpi/progress_store.h"

#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstring>

#include "common/env.h"
#include "common/host.h"
#include "dist/rendezvous/probe.h"
#include "dist/rendezvous/store_client.h"
#include "kindling/log.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

// Where rank 0's store listens; port 0 when it could not start.
struct StoreAddress {
  char host[256] = {};
  int port = 0;
};

std::string local_host_name() {
  if (auto addr = ::kindling::detail::get_env("MASTER_ADDR"); addr && !addr->empty()) return *addr;
  return ::kindling::detail::host_name("127.0.0.1");
}

void warn_off(int rank, const std::string& why) {
  log(LogLevel::kWarning, "kindling::dist::initialize(\"mpi\"): warning: rank " + std::to_string(rank) +
                              ": stall detection is off for this rank: " + why +
                              ". A hung rank is then found only by the collective timeout "
                              "(InitOptions::timeout); set MASTER_ADDR to an address of rank 0's node that the other "
                              "nodes reach to enable it");
}

}  // namespace

MonitorTarget open_progress_store(MPI_Comm world, int rank, std::chrono::milliseconds timeout) {
  StoreAddress where;
  c10::intrusive_ptr<c10d::Store> store;
  c10d::TCPStoreOptions opts;
  opts.waitWorkers = false;
  // Short: store operations run on the monitor's thread and a slow answer is itself news.
  opts.timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(30));
  std::string failure;
  if (rank == 0) {
    try {
      opts.isServer = true;
      opts.port = 0;  // a free port, chosen by the system
      const std::string host = local_host_name();
      store = c10::make_intrusive<c10d::TCPStore>(host, opts);
      std::strncpy(where.host, host.c_str(), sizeof(where.host) - 1);
      where.port = static_cast<int>(static_cast<c10d::TCPStore&>(*store).getPort());
    } catch (const std::exception& e) {
      failure = std::string("rank 0 could not start its progress store: ") + e.what();
      store.reset();
    }
  }
  if (MPI_Bcast(&where, sizeof(where), MPI_BYTE, 0, world) != MPI_SUCCESS) {
    warn_off(rank, "MPI_Bcast of the store's address failed");
    return {};
  }
  if (where.port == 0) {
    warn_off(rank, failure.empty() ? std::string("rank 0 could not start its progress store") : failure);
    return {};
  }
  if (rank != 0) {
    const std::string host = where.host;
    try {
      opts.isServer = false;
      opts.port = static_cast<std::uint16_t>(where.port);
      // The connecting thread may outlive this call (run_bounded): it owns what it writes.
      auto slot = std::make_shared<c10::intrusive_ptr<c10d::Store>>();
      if (run_bounded([slot, host, opts] { *slot = open_store_client(host, opts); },
                      std::chrono::seconds(10)))
        store = *slot;
      if (!store) failure = "rank 0's progress store at " + host + ":" + std::to_string(where.port) + " did not answer";
    } catch (const std::exception& e) {
      failure = "could not reach rank 0's progress store at " + host + ":" + std::to_string(where.port) + ": " + e.what();
      store.reset();
    }
    if (!store) {
      warn_off(rank, failure);
      return {};
    }
  }
  return {store, 0, std::string("the progress store of rank 0 at ") + where.host + ":" + std::to_string(where.port)};
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
