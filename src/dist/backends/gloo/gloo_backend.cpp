#include "dist/backends/gloo/gloo_backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "common/env.h"
#include "dist/backends/c10d/c10d_backend.h"
#include "dist/backends/c10d/c10d_compat.h"
#include "dist/rendezvous/rendezvous.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {
using ::kindling::detail::get_env;

// A ProcessGroupGloo over `store` with kindling's options, serving CPU and CUDA tensors
// (Gloo copies CUDA tensors through host memory), as torch.distributed registers it.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                 const std::string& group_name, std::chrono::milliseconds timeout,
                                                 int threads, bool honour_ifname) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  // Same device choice as Python: GLOO_SOCKET_IFNAME if set, else the host name's address.
  auto ifname = honour_ifname ? get_env("GLOO_SOCKET_IFNAME") : std::nullopt;
  opts->devices.push_back(ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(*ifname)
                                 : c10d::ProcessGroupGloo::createDefaultDevice());
  if (threads > 0) opts->threads = threads;
  auto engine = c10::make_intrusive<c10d::ProcessGroupGloo>(engine_store(store, "cpu"), rank, size, opts);
  return as_process_group(engine, store, "gloo", EngineDevices{true, true}, group_name);
}

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const WorldConfig& config) {
  auto store = connect_store(config);
  const auto timeout = config.timeout;
  const int threads = config.gloo_threads;
  auto factory = [timeout, threads](c10::intrusive_ptr<c10d::Store> s, int rank, int size, const std::string& name) {
    return make_gloo(std::move(s), rank, size, name, timeout, threads, true);
  };
  auto backend =
      std::make_unique<C10dBackend>("gloo", store, config.rank, config.world_size, config.timeout, std::move(factory));
  backend->create_world();
  auto target = connect_monitor_store(config);
  if (!target.store) target.store = store;
  backend->set_monitor_target(std::move(target));
  return backend;
}

std::unique_ptr<Backend> make_external_c10d_backend(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                                    c10::intrusive_ptr<c10d::Store> store, std::string name,
                                                    std::chrono::milliseconds timeout) {
  const int rank = pg->getRank();
  const int size = pg->getSize();
  ProcessGroupFactory factory;
  if (name == "gloo") {
    factory = [timeout](c10::intrusive_ptr<c10d::Store> s, int r, int n, const std::string& group_name) {
      return make_gloo(std::move(s), r, n, group_name, timeout, 0, false);
    };
  } else {
    factory = [name](c10::intrusive_ptr<c10d::Store>, int, int,
                     const std::string&) -> c10::intrusive_ptr<c10d::ProcessGroup> {
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
