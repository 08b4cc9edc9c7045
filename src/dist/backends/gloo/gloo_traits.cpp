// What generic code knows about the gloo backend (backend_traits.h); compiled in every build.
#include "dist/backends/gloo/gloo_backend.h"
#include "kindling/config.h"

namespace kindling::dist::detail {

BackendTraits gloo_traits() {
  BackendTraits t;
  t.name = "gloo";
  t.build_hint = "gloo needs -DKINDLING_WITH_GLOO=ON";
  // c10d's gloo work can be waited on again after a wait that expired.
  t.stall_watch = StallWatch::kSlices;
  t.flight_recorder_name = "gloo";
  t.polls_from_any_thread = true;
  // No kernels for int16, bool, complex (nor bfloat16 on older LibTorch): c10d_communicator.cpp.
  t.widens_missing_dtypes = true;
  t.message_waits_may_time_out = false;
#if KINDLING_HAS_GLOO
  t.make = make_gloo_backend;
  t.adopted_groups = adopted_gloo_groups;
#endif
  return t;
}

}  // namespace kindling::dist::detail
