#pragma once
// Internal to the Timeline handler (kindling/handlers/profilers/timeline.h): ranks' events as a
// Chrome trace, the JSON "trace event" format (one object with a traceEvents array; each span a
// complete event, ph "X", ts and dur in microseconds; rows named by metadata events), which
// Perfetto, chrome://tracing and TensorBoard's trace viewer read.
#include <string>
#include <vector>

#include "kindling/handlers/profilers/timeline.h"

namespace kindling {
namespace handlers {
namespace detail {

/// The trace of `ranks` (each rank a process, "rank <r>"; its lanes threads: engine, step and
/// as many communication rows as its overlapping operations need). `other_data` is a JSON
/// object's members ("\"key\": value, ..."), written into the trace's otherData. Throws
/// std::bad_alloc only.
std::string chrome_trace(const std::vector<RankTimeline>& ranks, const std::string& other_data);

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
