// What generic code knows about the gloo backend (registry.h); compiled in every build.
#include "dist/backends/gloo/gloo_backend.h"
#include "kindling/config.h"

namespace kindling::dist::detail {

BackendTraits gloo_traits() {
  BackendTraits t;
  t.name = "gloo";
  t.build_hint = "gloo needs -DKINDLING_WITH_GLOO=ON";
  // c10d's gloo work can be waited on again after a wait that expired.
  t.stall_watch = StallWatch::kSlices;
#if KINDLING_HAS_GLOO
  t.make = make_gloo_backend;
  t.adopted_groups = adopted_gloo_groups;
#endif
  return t;
}

}  // namespace kindling::dist::detail
