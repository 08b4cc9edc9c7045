#pragma once
/// \file
/// One clock for the ranks of a job: how far this rank's steady clock is from rank 0's, found
/// by round trips (NTP's rule), so that events timed on different hosts can be put on one
/// axis (kindling::handlers::Timeline merges the ranks' timelines with it).
///
/// \code
///   auto offset = kindling::dist::measure_clock_offset();   // collective: every rank
///   int64_t on_rank0_clock = kindling::timeline::now_ns() + offset.offset_ns;
/// \endcode
///
/// Measured when asked, not at initialize: a job that never merges timelines pays nothing, and
/// a measurement taken just before the events it aligns is not blurred by the clocks' drift
/// since (a few microseconds a second between hosts). On one host every process reads the same
/// steady clock, so the offset found there is 0 within its uncertainty.
#include <cstdint>

#include "kindling/export.h"

namespace kindling {
namespace dist {

/// Rank 0's steady clock minus this rank's, and how far from the truth it can be.
struct KINDLING_API ClockOffset {
  /// Add to this rank's steady-clock time (ns) to get rank 0's.
  int64_t offset_ns = 0;
  /// Half the shortest round trip measured: the offset is within this of the truth when the
  /// two directions of the link are equally fast.
  int64_t uncertainty_ns = 0;
};

/// Collective over the world: every rank calls it, in the same order. Rank 0 exchanges
/// `rounds` small messages with each other rank in turn (point-to-point: send / recv), keeps
/// each rank's round with the shortest round trip, and broadcasts the results. Returns {0, 0}
/// on rank 0 and in the serial model. Throws kindling::UsageError for rounds < 1;
/// kindling::TimeoutError / kindling::CommunicationError from the exchanges.
KINDLING_API ClockOffset measure_clock_offset(int rounds = 8);

}  // namespace dist
}  // namespace kindling
