// The collectives on the timeline (timeline_ops.h).
#include "dist/diagnostics/timeline_ops.h"

#include <c10/core/ScalarType.h>

#include <string>
#include <utility>

#include "dist/backends/backend.h"
#include "kindling/timeline.h"

namespace kindling {
namespace dist {
namespace detail {

TimelineOp timeline_begin(const GroupState& g, int64_t seq, const char* name, const at::Tensor* described,
                          bool p2p) noexcept {
  TimelineOp op;
  if (!timeline::recording()) return op;
  op.name = name;
  op.group = g.id;
  op.group_size = static_cast<int>(g.ranks.size());
  op.seq = seq;
  op.p2p = p2p;
  if (described != nullptr && described->defined()) {
    op.bytes = static_cast<int64_t>(described->numel()) * static_cast<int64_t>(described->element_size());
    op.dtype = described->scalar_type();
  }
  op.start_ns = timeline::now_ns();
  return op;
}

void timeline_end(const TimelineOp& op) noexcept {
  if (op.start_ns < 0) return;
  const int64_t end = timeline::now_ns();
  try {
    timeline::TimelineEvent e;
    e.name = op.name;
    e.lane = timeline::Lane::kCommunication;
    e.start_ns = op.start_ns;
    e.end_ns = end;
    e.text_args.emplace_back("group", op.group == 0 ? std::string("world") : "group #" + std::to_string(op.group));
    if (op.bytes >= 0) e.text_args.emplace_back("dtype", c10::toString(op.dtype));
    e.number_args.emplace_back("group size", op.group_size);
    // The collective's number is the flight recorder's (and torch's analyzer's) sequence number.
    if (!op.p2p) e.number_args.emplace_back("sequence number", static_cast<double>(op.seq));
    if (op.bytes >= 0) e.number_args.emplace_back("bytes", static_cast<double>(op.bytes));
    timeline::record(std::move(e));
  } catch (...) {  // no memory for the event: it is lost, never the operation
  }
}

void timeline_watch(WorkState& state) noexcept {
  if (state.timeline.start_ns < 0 || !state.op) return;
  try {
    const TimelineOp op = state.timeline;
    if (state.op->notify_completion([op] { timeline_end(op); })) state.timeline.start_ns = -1;  // not again at wait
  } catch (...) {  // the engine refused the callback: the wait records the end
  }
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
