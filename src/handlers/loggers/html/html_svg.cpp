// The charts of kindling's HTML training report (html_svg.h): axes with "nice" ticks
// (Heckbert's loose labelling, Graphics Gems I, 1990), a light grid, one polyline per series,
// markers for short series, a legend with the latest values, all as inline SVG text.
// Written by hand for the reasons html_page.h gives.
#include "handlers/loggers/html/html_svg.h"
#include "handlers/loggers/json_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

namespace kindling {
namespace handlers {
namespace detail {
namespace html {

const char* const kPalette[kPaletteSize] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                            "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79"};

namespace {

constexpr double kWidth = 600;  // the SVG's viewBox, in CSS pixels at a card width of 600
constexpr double kHeight = 300;
constexpr double kInset = 7;  // space between the plot's frame and the data, for markers
constexpr std::size_t kMaxDrawn = 2000;
constexpr std::size_t kMarkerLimit = 50;
constexpr std::size_t kSmoothFrom = 100;

using XY = std::pair<double, double>;

// "1.5e-05" -> "1.5e-5", "1e+06" -> "1e6".
std::string tidy_exponent(std::string text) {
  const auto e = text.find('e');
  if (e == std::string::npos) return text;
  std::string exponent = text.substr(e + 1);
  const bool negative = !exponent.empty() && exponent[0] == '-';
  if (!exponent.empty() && (exponent[0] == '-' || exponent[0] == '+')) exponent.erase(0, 1);
  const auto digit = exponent.find_first_not_of('0');
  exponent = digit == std::string::npos ? "0" : exponent.substr(digit);
  return text.substr(0, e) + (negative ? "e-" : "e") + exponent;
}

std::string chars(double value, std::chars_format format, int precision) {
  char buffer[512];  // fixed notation of 1e308 with 15 decimals fits
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, format, precision);
  if (result.ec != std::errc()) return display_number(value, 6);
  return tidy_exponent(std::string(buffer, result.ptr));
}

// Coordinates in the SVG: one decimal is plenty at this size.
std::string coordinate(double value) { return chars(value, std::chars_format::fixed, 1); }

// 1, 2, 5 or 10 times a power of ten near `x` (> 0): rounded, or the smallest not below.
double nice_number(double x, bool round) {
  const double power = std::pow(10.0, std::floor(std::log10(x)));
  const double f = x / power;
  if (round) return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * power;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * power;
}

// An axis from lo to hi with its ticks; `step` is the ticks' spacing.
struct Axis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks;
};

// Loose labelling of [lo, hi] with about `target` ticks; whole-number ticks when `integer`.
Axis nice_axis(double lo, double hi, int target, bool integer) {
  if (!(lo < hi)) {  // one value: a range around it, not below 0 for steps that are not
    const double pad = std::max(integer ? 1.0 : 0.0, lo == 0 ? 1.0 : std::fabs(lo) * 0.1);
    const bool natural = integer && lo >= 0;
    lo = natural ? std::max(0.0, lo - pad) : lo - pad;
    hi += pad;
  }
  Axis axis;
  axis.lo = lo;
  axis.hi = hi;
  axis.step = hi - lo;
  axis.ticks = {lo, hi};
  const double range = hi - lo;
  if (!std::isfinite(range) || !(range > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return axis;
  double step = nice_number(nice_number(range, false) / (target - 1), true);
  if (integer) step = std::max(step, 1.0);
  const double k0 = std::floor(lo / step), k1 = std::ceil(hi / step);
  if (!(step > 0) || !std::isfinite(k0 * step) || !std::isfinite(k1 * step) || k1 - k0 > 40) return axis;
  axis.lo = k0 * step;
  axis.hi = k1 * step;
  axis.step = step;
  axis.ticks.clear();
  for (double k = k0; k <= k1; k += 1) axis.ticks.push_back(std::fabs(k) < 0.5 ? 0.0 : k * step);
  return axis;
}

// The tick labels, all with the same number of decimals (or as 250k, 1.5M on long x axes).
std::vector<std::string> tick_labels(const Axis& axis, bool integer) {
  std::vector<std::string> labels;
  const double biggest = std::max(std::fabs(axis.lo), std::fabs(axis.hi));
  const bool usable = std::isfinite(axis.step) && axis.step > 0 && std::isfinite(biggest);
  const int step_exponent = usable ? static_cast<int>(std::floor(std::log10(axis.step))) : 0;
  for (const double tick : axis.ticks) {
    if (!usable) {
      labels.push_back(display_number(tick, 4));
    } else if (integer && biggest >= 1e4) {
      const bool millions = biggest >= 1e6;
      const int decimals = std::clamp((millions ? 6 : 3) - step_exponent, 0, 6);
      labels.push_back(tick == 0 ? "0"
                                 : chars(tick / (millions ? 1e6 : 1e3), std::chars_format::fixed, decimals) +
                                       (millions ? "M" : "k"));
    } else if (biggest >= 1e6 || biggest < 1e-3) {
      const int digits = tick == 0 ? 0 : static_cast<int>(std::floor(std::log10(std::fabs(tick)))) - step_exponent;
      labels.push_back(tick == 0 ? "0" : chars(tick, std::chars_format::scientific, std::clamp(digits, 0, 15)));
    } else {
      labels.push_back(chars(tick, std::chars_format::fixed, std::clamp(-step_exponent, 0, 15)));
    }
  }
  return labels;
}

// Where `value` of [lo, hi] lands on [from, to] (the middle when the range is empty).
double place(double value, double lo, double hi, double from, double to) {
  const double span = hi * 0.5 - lo * 0.5;  // halves: no overflow for ranges near DBL_MAX
  if (!(span > 0) || !std::isfinite(span)) return (from + to) / 2;
  return from + (value * 0.5 - lo * 0.5) / span * (to - from);
}

// At most `limit` of `points`: per bucket of consecutive points, its lowest and highest.
std::vector<XY> min_max_buckets(const std::vector<XY>& points, std::size_t limit) {
  if (points.size() <= limit) return points;
  std::vector<XY> kept;
  const std::size_t buckets = limit / 2, n = points.size();
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::size_t begin = b * n / buckets, end = (b + 1) * n / buckets;
    std::size_t low = begin, high = begin;
    for (std::size_t i = begin; i < end; ++i) {
      if (points[i].second < points[low].second) low = i;
      if (points[i].second > points[high].second) high = i;
    }
    kept.push_back(points[std::min(low, high)]);
    if (low != high) kept.push_back(points[std::max(low, high)]);
  }
  return kept;
}

// Whether a long series is noisy enough to smooth: it moves up and down much more than its
// range (a warm-up then decay, or a steady decrease, moves about its range once or twice).
bool noisy(const std::vector<XY>& points) {
  if (points.size() <= kSmoothFrom) return false;
  double lo = points[0].second, hi = lo, travel = 0;
  for (std::size_t i = 1; i < points.size(); ++i) {
    lo = std::min(lo, points[i].second);
    hi = std::max(hi, points[i].second);
    travel += std::fabs(points[i].second - points[i - 1].second);
  }
  return hi > lo && travel > 3 * (hi - lo);
}

// TensorBoard's smoothing: a debiased exponential moving average, its weight set by length.
std::vector<XY> smoothed(const std::vector<XY>& points) {
  const double weight = std::clamp(1.0 - 50.0 / static_cast<double>(points.size()), 0.6, 0.995);
  std::vector<XY> out;
  out.reserve(points.size());
  double average = 0, decay = 1;
  for (const XY& p : points) {
    average = average * weight + (1 - weight) * p.second;
    decay *= weight;
    out.emplace_back(p.first, average / (1 - decay));
  }
  return out;
}

// One series, ready to draw.
struct Drawn {
  const Series* series = nullptr;
  std::vector<XY> points;  // finite ones, by step
  std::size_t nan = 0, inf = 0, minus_inf = 0;
  bool smooth = false;
};

// The plot area: axes, the drawing box, and value -> pixel.
struct PlotFrame {
  Axis x, y;
  std::vector<std::string> x_labels, y_labels;
  double left = 0, right = 0, top = 10, bottom = 0;
  double px(double v) const { return place(v, x.lo, x.hi, left + kInset, right - kInset); }
  double py(double v) const { return place(v, y.lo, y.hi, bottom - kInset, top + kInset); }
};

// Each series sorted by step, its finite points apart from the NaN / inf counts; the ranges
// of steps and finite values of all of them.
std::vector<Drawn> prepare_series(const Chart& chart, double& x_lo, double& x_hi, double& y_lo, double& y_hi) {
  std::vector<Drawn> drawn;
  x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const Series& series : chart.series) {
    Drawn d;
    d.series = &series;
    std::vector<Point> points = series.points;
    std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.step < b.step; });
    for (const Point& p : points) {
      x_lo = std::min(x_lo, static_cast<double>(p.step));
      x_hi = std::max(x_hi, static_cast<double>(p.step));
      if (std::isnan(p.value))
        ++d.nan;
      else if (std::isinf(p.value))
        ++(p.value > 0 ? d.inf : d.minus_inf);
      else
        d.points.emplace_back(static_cast<double>(p.step), p.value);
      if (std::isfinite(p.value)) y_lo = std::min(y_lo, p.value), y_hi = std::max(y_hi, p.value);
    }
    d.smooth = noisy(d.points);
    drawn.push_back(std::move(d));
  }
  return drawn;
}

PlotFrame make_plot_frame(double x_lo, double x_hi, double y_lo, double y_hi) {
  if (x_lo > x_hi) x_lo = x_hi = 0;
  if (y_lo > y_hi) y_lo = 0, y_hi = 1;  // nothing finite: an empty frame
  PlotFrame f;
  f.x = nice_axis(x_lo, x_hi, 7, true);
  f.y = nice_axis(y_lo, y_hi, 6, false);
  f.x_labels = tick_labels(f.x, true);
  f.y_labels = tick_labels(f.y, false);
  std::size_t widest = 1;
  for (const std::string& label : f.y_labels) widest = std::max(widest, label.size());
  f.left = std::clamp(16.0 + 6.6 * static_cast<double>(widest), 40.0, 160.0);
  f.right = kWidth - 14;
  f.bottom = kHeight - 40;
  return f;
}

// The <svg> element's opening, the grid, the axes, their ticks and the x axis' label.
std::string render_frame(const Chart& chart, const PlotFrame& f, const std::vector<Drawn>& drawn) {
  std::string colours;
  for (const Drawn& d : drawn) {
    if (d.points.empty()) continue;
    if (colours.find(d.series->colour) != std::string::npos) continue;
    colours += (colours.empty() ? "" : ",") + d.series->colour;
  }
  std::string svg = "<svg class=\"plot\" viewBox=\"0 0 " + coordinate(kWidth) + " " + coordinate(kHeight) +
                    "\" role=\"img\" aria-label=\"" + escape(chart.title) + "\" data-series-colors=\"" + colours +
                    "\">\n<g class=\"grid\">";
  for (const double t : f.y.ticks) {
    const std::string y = coordinate(f.py(t));
    svg += "<line x1=\"" + coordinate(f.left) + "\" x2=\"" + coordinate(f.right) + "\" y1=\"" + y + "\" y2=\"" + y +
           "\"/>";
  }
  for (const double t : f.x.ticks) {
    const std::string x = coordinate(f.px(t));
    svg += "<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + coordinate(f.top) + "\" y2=\"" + coordinate(f.bottom) +
           "\"/>";
  }
  svg += "</g>\n<g class=\"axis\"><path d=\"M" + coordinate(f.left) + " " + coordinate(f.top) + "V" +
         coordinate(f.bottom) + "H" + coordinate(f.right) + "\"/>";
  for (const double t : f.y.ticks) svg += "<path d=\"M" + coordinate(f.left - 4) + " " + coordinate(f.py(t)) + "h4\"/>";
  for (const double t : f.x.ticks) svg += "<path d=\"M" + coordinate(f.px(t)) + " " + coordinate(f.bottom) + "v4\"/>";
  svg += "</g>\n<g class=\"ticks\">";
  for (std::size_t i = 0; i < f.y.ticks.size(); ++i) {
    svg += "<text x=\"" + coordinate(f.left - 7) + "\" y=\"" + coordinate(f.py(f.y.ticks[i]) + 4) +
           "\" text-anchor=\"end\">" + escape(f.y_labels[i]) + "</text>";
  }
  for (std::size_t i = 0; i < f.x.ticks.size(); ++i) {
    svg += "<text x=\"" + coordinate(f.px(f.x.ticks[i])) + "\" y=\"" + coordinate(f.bottom + 17) +
           "\" text-anchor=\"middle\">" + escape(f.x_labels[i]) + "</text>";
  }
  svg += "</g>\n<text class=\"axis-label\" x=\"" + coordinate((f.left + f.right) / 2) + "\" y=\"" +
         coordinate(kHeight - 5) + "\" text-anchor=\"middle\">" + escape(chart.x_label) + "</text>\n";
  return svg;
}

// The series' lines (a faint line and its moving average where noisy), then the markers over
// every line; `notes` gets what was thinned or left out.
std::string render_series(const Chart& chart, const PlotFrame& f, const std::vector<Drawn>& drawn, std::string& notes) {
  std::string svg;
  for (const Drawn& d : drawn) {
    const std::string dash = d.series->dashed ? "\" stroke-dasharray=\"7 4" : "";
    auto polyline = [&](const std::vector<XY>& points, const char* extra) {
      if (points.size() < 2) return;
      svg += "<polyline class=\"line\" stroke=\"" + d.series->colour + dash + "\"" + extra + " points=\"";
      for (const XY& p : min_max_buckets(points, kMaxDrawn))
        svg += coordinate(f.px(p.first)) + "," + coordinate(f.py(p.second)) + " ";
      svg.back() = '"';
      svg += "/>\n";
    };
    polyline(d.points, d.smooth ? " stroke-opacity=\"0.28\"" : "");
    if (d.smooth) polyline(smoothed(d.points), " stroke-width=\"2.2\"");
    if (d.points.size() > kMaxDrawn) {
      notes += "<p class=\"note\">" + escape(d.series->label) + ": " + std::to_string(d.points.size()) +
               " values; the line joins the lowest and highest of each of " + std::to_string(kMaxDrawn / 2) +
               " buckets.</p>";
    }
    if (d.nan + d.inf + d.minus_inf > 0) {
      std::string kinds;
      for (const auto& [count, word] :
           {std::make_pair(d.nan, "NaN"), std::make_pair(d.inf, "+inf"), std::make_pair(d.minus_inf, "-inf")}) {
        if (count > 0) kinds += (kinds.empty() ? "" : ", ") + std::to_string(count) + " " + word;
      }
      notes += "<p class=\"note warn\">" + escape(d.series->label) + ": " + kinds + " not drawn.</p>";
    }
  }
  for (const Drawn& d : drawn) {
    if (d.points.size() > kMarkerLimit) continue;
    for (const XY& p : d.points) {
      svg += "<circle class=\"marker\" cx=\"" + coordinate(f.px(p.first)) + "\" cy=\"" + coordinate(f.py(p.second)) +
             "\" r=\"3.6\" fill=\"" + d.series->colour + "\"><title>" + escape(d.series->label) + ", " +
             escape(chart.x_label) + " " + shortest_number(p.first) + ": " + shortest_number(p.second) +
             "</title></circle>";
    }
  }
  if (std::any_of(drawn.begin(), drawn.end(), [](const Drawn& d) { return d.smooth; })) {
    notes += "<p class=\"note\">Noisy series: the faint line is every value, the bold one a moving average.</p>";
  }
  return svg;
}

// Each series' swatch, label and latest value.
std::string render_legend(const Chart& chart, const std::vector<Drawn>& drawn) {
  std::string legend = "<ul class=\"legend\">";
  for (const Drawn& d : drawn) {
    legend += "<li><span class=\"swatch" + std::string(d.series->dashed ? " dashed" : "") +
              "\" style=\"color:" + d.series->colour + "\"></span>" + escape(d.series->label);
    if (d.points.empty()) {
      legend += " <span class=\"latest\">no finite value</span></li>";
      continue;
    }
    const XY& last = d.points.back();
    legend += " <span class=\"latest\" title=\"latest value, at " + escape(chart.x_label) + " " +
              shortest_number(last.first) + ": " + shortest_number(last.second) + "\">" +
              escape(display_number(last.second, 4)) + "</span></li>";
  }
  return legend + "</ul>\n";
}

}  // namespace

std::string display_number(double value, int significant) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::general, significant);
  return tidy_exponent(std::string(buffer, result.ptr));
}

std::string render_chart_card(const Chart& chart) {
  double x_lo, x_hi, y_lo, y_hi;
  const std::vector<Drawn> drawn = prepare_series(chart, x_lo, x_hi, y_lo, y_hi);
  const PlotFrame frame = make_plot_frame(x_lo, x_hi, y_lo, y_hi);
  std::string notes;
  const std::string svg = render_frame(chart, frame, drawn) + render_series(chart, frame, drawn, notes) + "</svg>\n";
  return "<section class=\"card chart\">\n<h2>" + escape(chart.title) + "</h2>\n" + render_legend(chart, drawn) + svg +
         notes + "</section>\n";
}

}  // namespace html
}  // namespace detail
}  // namespace handlers
}  // namespace kindling
