#pragma once
// Internal to kindling's handlers: the self-contained HTML training report. render_html_page
// turns a run's title, configuration and logged scalars into one HTML document that needs
// nothing else to be read: inline CSS, one inline SVG chart per scalar name (drawn here, in
// C++, so the page needs no JavaScript and no network), the configuration as a table, and
// every record embedded as JSON for machines
// (<script type="application/json" id="kindling-report-data">, read back by
// tests/handlers/check_report.py).
//
// Why it is written by hand: no Debian package renders charts to self-contained HTML or SVG
// from C++ (the plotting libraries there are Python's or draw through a display, a PNG or a
// PDF backend), and what a training report needs (axes with "nice" ticks, a grid, polylines,
// markers, a legend) is a few hundred lines. Plain C++17 standard library only, so that it
// is tested without LibTorch. The chart drawing is in html_svg.cpp (html_svg.h).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kindling {
namespace handlers {
namespace detail {

/// One logged scalar: `tag` ("training", "train", "test", or "" for none) and `name`
/// ("batch loss", "Accuracy", "lr/group_0") as the loggers take them, the step it was logged
/// at (an iteration or an epoch) and its value (NaN and infinities allowed).
struct ScalarRecord {
  std::string tag;
  std::string name;
  int64_t step = 0;
  double value = 0.0;
};

/// Everything a report page shows. Text may hold any bytes: it is escaped for HTML and JSON,
/// and bytes that are not well-formed UTF-8 are shown (and embedded) as U+FFFD.
struct PageContent {
  /// The page's heading and <title>, e.g. "resnet18 on fashion-mnist, gloo x 2";
  /// "kindling training report" when empty.
  std::string title;
  /// The run's configuration (key, value), shown as a table in this order.
  std::vector<std::pair<std::string, std::string>> config;
  /// The scalars, in the order they were logged. One chart per distinct name, in order of
  /// first appearance; within a chart one series per tag.
  std::vector<ScalarRecord> records;
  /// A line under the heading, e.g. "updated 2026-11-23 10:00:00 after epoch 3"; left out
  /// when empty.
  std::string footer;
  /// The picture of one step of every rank (html_timeline.h's card), shown after the charts;
  /// none when empty.
  std::string timeline_card;
};

/// The whole page (<!DOCTYPE html> to </html>, UTF-8). Charts: x is the step, y the value;
/// non-finite values are left out of the drawing (each chart says how many), a series of
/// more than 2000 points is drawn through min/max buckets (the embedded JSON keeps every
/// record, values in the shortest form that reads back to the same double, non-finite ones
/// as null with "non_finite": "nan" | "inf" | "-inf"). Throws nothing but std::bad_alloc.
std::string render_html_page(const PageContent& content);

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
