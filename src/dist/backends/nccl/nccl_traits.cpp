// What generic code knows about the nccl backend (backend_traits.h); compiled in every build.
#include "dist/backends/nccl/nccl_backend.h"
#include "kindling/config.h"

namespace kindling::dist::detail {

BackendTraits nccl_traits() {
  BackendTraits t;
  t.name = "nccl";
  t.build_hint = "this kindling was built without nccl: configure a CUDA LibTorch with -DKINDLING_WITH_NCCL=ON";
  t.needs_cuda = true;
  t.without_cuda = "use the gloo backend on CPU";
  t.serves_cpu = false;
  // A wait on NCCL work does not block the CPU; c10d's watchdog reports timeouts.
  t.stall_watch = StallWatch::kNone;
  t.flight_recorder_name = "nccl";
  t.polls_from_any_thread = true;
  t.native_chunk_collectives = true;
#if KINDLING_HAS_NCCL
  t.make = make_nccl_backend;
#endif
  return t;
}

}  // namespace kindling::dist::detail
