// The report's picture of one step of every rank (html_timeline.h).
#include "handlers/loggers/html/html_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "handlers/loggers/html/html_svg.h"
#include "handlers/profilers/chrome_trace.h"

namespace kindling {
namespace handlers {
namespace detail {
namespace {

using timeline::Lane;
using timeline::TimelineEvent;

// The colour of a part (kPalette's), and the legend's order of parts.
struct Part {
  const char* label;
  std::size_t colour;
};
const Part kParts[] = {
    {"data", 0},           {"forward", 1},       {"loss", 7},     {"backward", 3}, {"DDP wait for buckets", 6},
    {"optimizer step", 2}, {"communication", 4}, {"handlers", 8}, {"other", 5}};

const char* part_of(const TimelineEvent& e) {
  if (e.lane == Lane::kCommunication) return "communication";
  if (e.lane == Lane::kEngine) {
    if (e.name == "data") return "data";
    for (const auto& kv : e.text_args)
      if (kv.first == "event") return "handlers";
    return e.name == "checkpoint write" ? "other" : nullptr;  // iterations, firings, process: containers
  }
  for (const Part& p : kParts)
    if (e.name == p.label) return p.label;
  return "other";
}

std::string colour_of(const char* part) {
  for (const Part& p : kParts)
    if (std::string(p.label) == part) return html::kPalette[p.colour];
  return html::kPalette[5];
}

const TimelineEvent* iteration_span(const RankTimeline& r, const std::string& name) {
  for (const auto& e : r.events)
    if (e.lane == Lane::kEngine && e.name == name) return &e;
  return nullptr;
}

TimelineBand band_of(const RankTimeline& r, const TimelineEvent& iteration) {
  TimelineBand band;
  band.rank = r.rank;
  band.rows = {"engine", "step"};
  std::vector<int64_t> comm_end;
  for (const auto& e : r.events) {
    if (e.start_ns < iteration.start_ns || e.end_ns > iteration.end_ns) continue;
    const char* part = part_of(e);
    if (part == nullptr) continue;
    TimelineBar bar{e.name, e.lane == Lane::kEngine ? std::size_t{0} : std::size_t{1}, e.start_ns, e.end_ns,
                    colour_of(part)};
    if (e.lane == Lane::kCommunication) {
      const std::size_t k = take_row(comm_end, e.start_ns, e.end_ns);
      if (k + 2 == band.rows.size())
        band.rows.push_back(k == 0 ? std::string("comm") : std::string("comm ") + std::to_string(k + 1));
      bar.row = 2 + k;
    }
    band.bars.push_back(std::move(bar));
  }
  return band;
}

// A step of about a seventh of `span` that is 1, 2 or 5 times a power of ten.
double tick_step(double span) {
  const double raw = std::max(span / 7.0, 1e-9);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10.0 * power;
}

std::string number(double v) { return html::display_number(v, 6); }

// The picture's geometry (SVG user units; times in ms from t0).
constexpr double kWidth = 1000, kLabel = 96, kRight = 12, kRow = 16, kBar = 12, kGap = 10, kAxis = 26;

struct Frame {
  int64_t t0 = 0;
  double span_ms = 1, scale = 1;
};

// One rank's band: its rows' labels and bars, from `y` down; notes the colours drawn in `used`.
void draw_band(std::ostringstream& svg, const TimelineBand& b, const Frame& f, double y, std::string& used) {
  for (std::size_t row = 0; row < b.rows.size(); ++row) {
    svg << "<text x=\"" << number(kLabel - 6) << "\" y=\"" << number(y + static_cast<double>(row) * kRow + 10)
        << "\" text-anchor=\"end\">";
    if (row == 0) svg << "rank " << b.rank << " ";
    svg << html::escape(b.rows[row]) << "</text>";
  }
  for (const auto& bar : b.bars) {
    const double ms = static_cast<double>(bar.end_ns - bar.start_ns) / 1e6;
    svg << "<rect x=\"" << number(kLabel + static_cast<double>(bar.start_ns - f.t0) / 1e6 * f.scale) << "\" y=\""
        << number(y + static_cast<double>(bar.row) * kRow) << "\" width=\"" << number(std::max(0.5, ms * f.scale))
        << "\" height=\"" << number(kBar) << "\" fill=\"" << bar.colour << "\"><title>" << html::escape(bar.name)
        << ": " << number(ms) << " ms</title></rect>";
    if (used.find(bar.colour) == std::string::npos) {
      used += used.empty() ? "" : ",";
      used += bar.colour;
    }
  }
}

// Ticks of 1, 2 or 5 times a power of ten ms, labelled under the bands (which end at `y`).
void draw_axis(std::ostringstream& svg, const Frame& f, double y) {
  const double step = tick_step(f.span_ms);
  for (double t = 0; t <= f.span_ms + 1e-9; t += step) {
    const std::string x = number(kLabel + t * f.scale);
    svg << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"0\" y2=\"" << number(y) << "\" class=\"tick\"/><text x=\""
        << x << "\" y=\"" << number(y + 14) << "\" text-anchor=\"middle\">" << number(t) << " ms</text>";
  }
}

// The legend: the parts whose colour was drawn, in kParts' order.
std::string legend(const std::string& used) {
  std::ostringstream out;
  out << "<ul class=\"legend\">";
  for (const Part& p : kParts)
    if (used.find(html::kPalette[p.colour]) != std::string::npos)
      out << "<li><span class=\"block\" style=\"background:" << html::kPalette[p.colour] << "\"></span>" << p.label
          << "</li>";
  out << "</ul>";
  return out.str();
}

}  // namespace

std::vector<TimelineBand> last_common_step(const std::vector<RankTimeline>& ranks, int64_t& iteration) {
  iteration = -1;
  if (ranks.empty()) return {};
  int64_t last = -1;
  for (const auto& e : ranks[0].events) {
    if (e.lane != Lane::kEngine || e.name.compare(0, 10, "iteration ") != 0) continue;
    const int64_t n = std::atoll(e.name.c_str() + 10);
    bool everywhere = true;
    for (const auto& r : ranks) everywhere = everywhere && iteration_span(r, e.name) != nullptr;
    if (everywhere) last = std::max(last, n);
  }
  if (last < 0) return {};
  iteration = last;
  std::vector<TimelineBand> bands;
  const std::string name = std::string("iteration ") + std::to_string(last);
  for (const auto& r : ranks) bands.push_back(band_of(r, *iteration_span(r, name)));
  return bands;
}

std::string render_timeline_card(const std::vector<TimelineBand>& bands, int64_t iteration) {
  Frame f;
  f.t0 = INT64_MAX;
  int64_t t1 = INT64_MIN;
  std::size_t rows = 0;
  for (const auto& b : bands) {
    rows += b.rows.size();
    for (const auto& bar : b.bars) {
      f.t0 = std::min(f.t0, bar.start_ns);
      t1 = std::max(t1, bar.end_ns);
    }
  }
  if (f.t0 >= t1) t1 = f.t0 + 1;
  f.span_ms = static_cast<double>(t1 - f.t0) / 1e6;
  f.scale = (kWidth - kLabel - kRight) / f.span_ms;
  std::ostringstream svg;
  std::string used, ranks;
  double y = 4;
  for (const auto& b : bands) {
    ranks += ranks.empty() ? "" : ",";
    ranks += std::to_string(b.rank);
    draw_band(svg, b, f, y, used);
    y += static_cast<double>(b.rows.size()) * kRow + kGap;
  }
  draw_axis(svg, f, y);
  const double height = static_cast<double>(rows) * kRow + static_cast<double>(bands.size()) * kGap + kAxis;
  std::ostringstream card;
  card << "<section class=\"card timeline\">\n<h2>One step of every rank (iteration " << iteration << ")</h2>\n"
       << legend(used) << "\n<svg class=\"timeline\" viewBox=\"0 0 " << number(kWidth) << " " << number(height)
       << "\" role=\"img\" aria-label=\"one step of every rank\" data-ranks=\"" << ranks << "\" data-colors=\"" << used
       << "\">" << svg.str()
       << "</svg>\n<p class=\"note\">From the Timeline handler, on rank 0's clock; hover a bar for its name and "
          "duration. The whole trace, every rank and iteration of the range: timeline.json (docs/debugging.md).</p>\n"
          "</section>\n";
  return card.str();
}

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
