#pragma once
// Internal to the Timeline handler (kindling/handlers/profilers/timeline.h): ranks' events as a
// Chrome trace, the JSON "trace event" format (one object with a traceEvents array; each span a
// complete event, ph "X", ts and dur in microseconds; rows named by metadata events), which
// Perfetto, chrome://tracing and TensorBoard's trace viewer read.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kindling/handlers/profilers/timeline.h"

namespace kindling {
namespace handlers {
namespace detail {

/// The row for a span from `start_ns` to `end_ns` among rows whose last spans end at `row_end`
/// (spans sorted by start): the first row free at its start, else a new one (appended);
/// `row_end` then holds its end. Does not throw but std::bad_alloc.
std::size_t take_row(std::vector<int64_t>& row_end, int64_t start_ns, int64_t end_ns);

/// The trace of `ranks` (each rank a process, "rank <r>"; its lanes threads: engine, step and
/// as many communication rows as its overlapping operations need). `other_data` is a JSON
/// object's members ("\"key\": value, ..."), written into the trace's otherData. Throws
/// std::bad_alloc only.
std::string chrome_trace(const std::vector<RankTimeline>& ranks, const std::string& other_data);

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
