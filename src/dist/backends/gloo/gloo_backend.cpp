#include "dist/backends/gloo/gloo_backend.h"

#include <net/if.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "common/env.h"
#include "dist/backends/c10d/c10d_backend.h"
#include "dist/backends/c10d/c10d_compat.h"
#include "dist/rendezvous/probe.h"
#include "dist/rendezvous/rendezvous.h"
#include "common/host.h"
#include "kindling/dist/launch_env.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {
using ::kindling::detail::get_env;

// A ProcessGroupGloo over `store` with kindling's options, serving CPU and CUDA tensors
// (Gloo copies CUDA tensors through host memory), as torch.distributed registers it.
// The address Gloo listens on and tells the peers:
//  1. GLOO_SOCKET_IFNAME's interface when set;
//  2. else the local address of the route to rank 0's host (where the other hosts reach this
//     one too), unless that is a loopback address;
//  3. else, in a job the launcher says spans several nodes, when MASTER_ADDR names a host
//     rather than loopback but resolves to a loopback address here (rank 0's own host under
//     Debian's "127.0.1.1 <own name>"), this host's only non-loopback address, if it has
//     exactly one (a job on one node keeps to loopback);
//  4. else Python's default: the host name's address.
// Python's default alone fails across hosts whenever a host's own name resolves to a
// loopback address or not at all: the peers are told an address they cannot reach.
// Refuses a GLOO_SOCKET_IFNAME that names no interface of this host, listing those it has
// (gloo's own error names neither the variable nor the choices).
void check_interface(const std::string& ifname) {
  if (::if_nametoindex(ifname.c_str()) != 0) return;
  std::string names;
  if (struct if_nameindex* all = ::if_nameindex()) {
    for (const struct if_nameindex* i = all; i->if_index != 0; ++i)
      names += (names.empty() ? "" : ", ") + std::string(i->if_name);
    ::if_freenameindex(all);
  }
  KINDLING_CHECK(false, "kindling::dist::initialize: GLOO_SOCKET_IFNAME='", ifname,
                 "' names no network interface of host ", ::kindling::detail::host_name("localhost"),
                 "; its interfaces are: ", names.empty() ? std::string("(none found)") : names,
                 ". Set it to one of these on this host (the variable is read on each host), or unset it");
}

std::shared_ptr<::gloo::transport::Device> gloo_device(bool honour_ifname, const std::string& master_addr,
                                                       bool several_nodes) {
  if (auto ifname = honour_ifname ? get_env("GLOO_SOCKET_IFNAME") : std::nullopt) {
    check_interface(*ifname);
    return c10d::ProcessGroupGloo::createDeviceForInterface(*ifname);
  }
  if (!master_addr.empty()) {
    const auto source = source_address_towards(master_addr);
    if (source && !is_loopback_address(*source)) return c10d::ProcessGroupGloo::createDeviceForHostname(*source);
    const bool names_loopback = master_addr == "localhost" || is_loopback_address(master_addr);
    if (source && !names_loopback && several_nodes) {
      const auto mine = own_addresses();
      if (mine.size() == 1) return c10d::ProcessGroupGloo::createDeviceForHostname(mine.front());
    }
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Whether the launcher says that the job has ranks on other nodes.
bool spans_several_nodes() {
  try {
    const LaunchEnvironment launch = detect_launch_environment();
    return (launch.nnodes && *launch.nnodes > 1) ||
           (launch.local_world_size && *launch.local_world_size < launch.world_size);
  } catch (const kindling::Error&) {
    return false;
  }
}

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                 const std::string& group_name, std::chrono::milliseconds timeout,
                                                 int threads,
                                                 const std::shared_ptr<::gloo::transport::Device>& device) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(device);
  if (threads > 0) opts->threads = threads;
  auto engine = c10::make_intrusive<c10d::ProcessGroupGloo>(engine_store(store, "cpu"), rank, size, opts);
  return as_process_group(engine, store, "gloo", EngineDevices{true, true}, group_name);
}

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const WorldConfig& config) {
  return start_c10d_world(gloo_traits(), config, /*monitor=*/true, [&config]() -> ProcessGroupFactory {
    const auto timeout = config.timeout;
    const int threads = config.gloo_threads;
    const auto device = gloo_device(true, config.master_addr, spans_several_nodes());
    return [timeout, threads, device](c10::intrusive_ptr<c10d::Store> s, int rank, int size, const std::string& name) {
      return make_gloo(std::move(s), rank, size, name, timeout, threads, device);
    };
  });
}

ProcessGroupFactory adopted_gloo_groups(std::chrono::milliseconds timeout) {
  return [timeout](c10::intrusive_ptr<c10d::Store> s, int r, int n, const std::string& group_name) {
    return make_gloo(std::move(s), r, n, group_name, timeout, 0, gloo_device(false, "", false));
  };
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
