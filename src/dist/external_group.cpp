// A process group the user made with c10d (kindling/dist/c10d.h): registered by
// use_process_group, picked up lazily by sync() on kindling's next call (idist's _need_to_sync).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/env.h"
#include "dist/backends/c10d/c10d_compat.h"
#include "dist/backends/c10d/c10d_backend.h"
#include "dist/backends/registry.h"
#include "dist/runtime.h"
#include "kindling/detail/torch_compat.h"
#include "kindling/dist/c10d.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {

using detail::runtime;
using ::kindling::detail::get_env_int;

void sync() {
  auto& rt = runtime();
  if (rt.world != nullptr || !rt.external_pg) {
    rt.need_sync = rt.world == nullptr && !rt.external_pg;
    return;
  }
  auto pg = rt.external_pg;
  auto store = rt.external_store;
  const int rank = pg->getRank();
  const int size = pg->getSize();
  std::optional<int> local = get_env_int("LOCAL_RANK");
  const auto timeout = rt.external_timeout;
  const detail::BackendTraits* traits = detail::find_backend(rt.external_backend);
  detail::install_model(detail::adopt_c10d_group(pg, store, traits, rt.external_backend, timeout), rank, size, timeout,
                        detail::default_stall_period(), local);
}

void use_process_group(c10::intrusive_ptr<::c10d::ProcessGroup> pg, c10::intrusive_ptr<::c10d::Store> store,
                       std::string backend, std::chrono::milliseconds timeout) {
  auto& rt = runtime();
  KINDLING_CHECK(pg, "kindling::dist::use_process_group: the process group is null");
  KINDLING_CHECK(rt.world == nullptr,
                 "kindling::dist::use_process_group: kindling is already initialized with "
                 "backend '",
                 rt.backend_name, "'; call finalize() first");
  KINDLING_CHECK(timeout.count() > 0, "kindling::dist::use_process_group: timeout must be positive, got ",
                 timeout.count(), " ms");
  rt.external_timeout = timeout;
  rt.external_pg = std::move(pg);
  rt.external_store = std::move(store);
  rt.external_backend = std::move(backend);
  rt.need_sync = true;
}

#if KINDLING_TORCH_C10D_BACKEND_CLASS
void use_process_group(c10::intrusive_ptr<::c10d::Backend> engine, c10::intrusive_ptr<::c10d::Store> store,
                       std::string backend, std::chrono::milliseconds timeout) {
  KINDLING_CHECK(engine, "kindling::dist::use_process_group: the backend is null");
  // The devices the engine serves, as its backend's traits say (both for a name kindling
  // does not know).
  const detail::BackendTraits* traits = detail::find_backend(backend);
  const detail::EngineDevices devices{traits == nullptr || traits->serves_cpu,
                                      traits == nullptr || traits->serves_cuda};
  auto pg = detail::as_process_group(engine, store, backend, devices, "0");
  use_process_group(std::move(pg), std::move(store), std::move(backend), timeout);
}
#endif

}  // namespace dist
}  // namespace kindling
