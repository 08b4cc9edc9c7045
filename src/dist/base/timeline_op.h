#pragma once
// One operation as the timeline shows it (src/dist/diagnostics/timeline_ops.h records it), here at the
// runtime's leaf because WorkState (src/dist/backends/backend.h) keeps one.
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace kindling {
namespace dist {
namespace detail {

/// What the timeline shows of one operation, taken as it starts.
struct TimelineOp {
  const char* name = "";
  int group = 0;
  int group_size = 1;
  int64_t seq = 0;  // the group's collective number; for point-to-point, the last collective's
  bool p2p = false;
  int64_t bytes = -1;  // -1: no tensor described
  at::ScalarType dtype = at::kFloat;
  int64_t start_ns = -1;  // -1: no timeline recording when it started
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
