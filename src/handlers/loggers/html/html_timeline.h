#pragma once
// Internal to kindling's HTML training report: the picture of one training step of every rank
// (HtmlReport::show_timeline), drawn from a Timeline's events as an inline SVG card: per rank a
// row for the engine (data wait, handlers, checkpoint writes), one for the step's parts and
// as many for communication as its overlapping operations need.
#include <cstdint>
#include <string>
#include <vector>

#include "kindling/handlers/profilers/timeline.h"

namespace kindling {
namespace handlers {
namespace detail {

/// One bar of the picture: a span, its row in its rank's band, and its colour.
struct TimelineBar {
  std::string name;
  std::size_t row = 0;
  int64_t start_ns = 0, end_ns = 0;
  std::string colour;
};

/// One rank's band.
struct TimelineBand {
  int rank = 0;
  std::vector<std::string> rows;  // "engine", "step", "comm", "comm 2", ...
  std::vector<TimelineBar> bars;
};

/// The bands of the last iteration that every rank in `ranks` recorded (`iteration` gets its
/// number), with the spans inside each rank's iteration; empty (and `iteration` -1) when there
/// is none. Does not throw but std::bad_alloc.
std::vector<TimelineBand> last_common_step(const std::vector<RankTimeline>& ranks, int64_t& iteration);

/// The card: heading, legend, the SVG (class "timeline", data-ranks: the ranks drawn,
/// data-colors: the colours of its bars) and a note. Does not throw but std::bad_alloc.
std::string render_timeline_card(const std::vector<TimelineBand>& bands, int64_t iteration);

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
