#pragma once
// The collectives on the timeline (kindling/timeline.h): call.h notes an operation as it
// starts, when a timeline records, and records it as a span of the communication lane when it
// completes (for an asynchronous one: when the engine says it did, else at the end of its wait).
#include <ATen/core/Tensor.h>

#include "dist/base/timeline_op.h"

namespace kindling {
namespace dist {
namespace detail {

struct GroupState;
struct WorkState;

/// The operation `name` (#seq on `g`) starting now, with its tensor when `described`; start_ns is
/// -1 (nothing to record later) when no timeline records. Never throws.
TimelineOp timeline_begin(const GroupState& g, int64_t seq, const char* name, const at::Tensor* described,
                          bool p2p) noexcept;

/// Records `op` as ending now, unless it began unrecorded. Never throws.
void timeline_end(const TimelineOp& op) noexcept;

/// For an asynchronous operation just started: asks its engine to record the end when it
/// completes; when the engine cannot tell, Work::wait records it (WorkState::timeline).
void timeline_watch(WorkState& state) noexcept;

}  // namespace detail
}  // namespace dist
}  // namespace kindling
