#pragma once
// Internal to kindling's HTML training report (html_page.h): one chart card (heading, legend,
// inline SVG plot, notes) and the text helpers that html_page.cpp and html_svg.cpp share.
// Plain C++17 standard library only. The helpers live in namespace `html` so that their
// names cannot meet those of the other handlers' internals (event_file.h has its own UTF-8
// checker).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kindling {
namespace handlers {
namespace detail {
namespace html {

/// The series colours, in the order tags are first seen across the page (so "train" has the
/// same colour in every chart): Tableau 10 without its grey (the axes are grey), plus a dark
/// blue. The page lists them in <meta name="kindling-palette"> for checkers.
extern const char* const kPalette[];
/// How many colours kPalette has; tags past that reuse them, drawn dashed.
constexpr std::size_t kPaletteSize = 10;


/// `text` escaped for HTML text and quoted attribute values: & < > " ' as entities, bytes
/// that are not UTF-8 and control characters other than tab, LF and CR as U+FFFD.
std::string escape(const std::string& text);


/// `value` for people: `significant` significant digits, no trailing zeros, exponents as
/// "1.5e-5"; "NaN", "inf", "-inf" for non-finite values.
std::string display_number(double value, int significant);

/// One logged value of a series.
struct Point {
  int64_t step = 0;
  double value = 0.0;
};

/// One line of a chart: the records of one (tag, name), in the order logged.
struct Series {
  /// The legend text: the tag, or the name when the tag is empty.
  std::string label;
  /// A colour of kPalette ("#rrggbb").
  std::string colour;
  /// Whether the line is drawn dashed (tags past kPaletteSize).
  bool dashed = false;
  /// Every value, non-finite ones included (they are counted, not drawn).
  std::vector<Point> points;
};

/// One chart: one scalar name.
struct Chart {
  /// The heading: the scalar's name.
  std::string title;
  /// The x axis's label: "iteration" or "epoch".
  std::string x_label;
  /// Its series, in order of first appearance.
  std::vector<Series> series;
};

/// The chart as an HTML card: <section class="card chart"> with an <h2>, the legend (each
/// series' latest value), an inline <svg class="plot"> whose data-series-colors attribute
/// lists the colours of the series drawn (those with a finite value), and notes on what was
/// not drawn, smoothed or thinned out. Steps are sorted (stably) for drawing; lines of more
/// than 2000 points are thinned by min/max buckets; series of at most 50 points get markers;
/// noisy series of more than 100 points are drawn faint with a smoothed line over them.
std::string render_chart_card(const Chart& chart);

}  // namespace html
}  // namespace detail
}  // namespace handlers
}  // namespace kindling
