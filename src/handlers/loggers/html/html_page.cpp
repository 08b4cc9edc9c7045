// kindling's self-contained HTML training report (html_page.h): the page around the charts
// (inline CSS, heading, configuration table), the embedded JSON of every record, and the
// HTML and JSON escaping. The charts themselves are drawn by html_svg.cpp.
#include "handlers/loggers/html/html_page.h"

#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "handlers/loggers/html/html_svg.h"
#include "handlers/loggers/json_text.h"

namespace kindling {
namespace handlers {
namespace detail {
namespace html {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence_length(text, i);
    const auto c = static_cast<unsigned char>(text[i]);
    if (length == 0 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.append(text, i, length);
    }
    i += length;
  }
  return out;
}

}  // namespace html

namespace {

// `text` as a JSON string (RFC 8259), safe inside <script>: < > & are written as \u003c,
// \u003e, \u0026 so that no "</script" or "<!--" can appear; bytes that are not UTF-8
// become U+FFFD, as kindling's JsonLogger writes them.
std::string json_quote(const std::string& text) {
  std::string out;
  for (const char c : detail::json_quote(text)) {  // < > & only ever stand for themselves in it
    switch (c) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += c;
    }
  }
  return out;
}

// The embedded data: {"title", "config": [[key, value], ...], "records": [{...}, ...]}.
std::string page_json(const PageContent& content) {
  std::string json = "{\"title\":" + json_quote(content.title) + ",\n\"config\":[";
  for (std::size_t i = 0; i < content.config.size(); ++i) {
    json += (i == 0 ? "[" : ",\n[") + json_quote(content.config[i].first) + "," + json_quote(content.config[i].second) +
            "]";
  }
  json += "],\n\"records\":[";
  json.reserve(json.size() + content.records.size() * 64);
  for (std::size_t i = 0; i < content.records.size(); ++i) {
    const ScalarRecord& r = content.records[i];
    json += (i == 0 ? "\n{\"tag\":" : ",\n{\"tag\":") + json_quote(r.tag) + ",\"name\":" + json_quote(r.name) +
            ",\"step\":" + std::to_string(r.step) + ",\"value\":";
    if (std::isfinite(r.value)) {
      json += shortest_number(r.value) + "}";
    } else {
      json += std::string("null,\"non_finite\":\"") +
              (std::isnan(r.value) ? "nan"
               : r.value > 0       ? "inf"
                                   : "-inf") +
              "\"}";
    }
  }
  return json + "\n]}";
}

// The records grouped into charts: one per name, one series per tag, colours by tag.
std::vector<html::Chart> group_charts(const std::vector<ScalarRecord>& records) {
  std::vector<html::Chart> charts;
  std::unordered_map<std::string, std::size_t> chart_of_name, colour_of_tag;
  std::vector<std::unordered_map<std::string, std::size_t>> series_of_tag;
  for (const ScalarRecord& r : records) {
    auto chart = chart_of_name.find(r.name);
    if (chart == chart_of_name.end()) {
      chart = chart_of_name.emplace(r.name, charts.size()).first;
      charts.push_back(html::Chart{r.name, "epoch", {}});
      series_of_tag.emplace_back();
    }
    html::Chart& c = charts[chart->second];
    auto series = series_of_tag[chart->second].find(r.tag);
    if (series == series_of_tag[chart->second].end()) {
      const std::size_t colour = colour_of_tag.emplace(r.tag, colour_of_tag.size()).first->second;
      series = series_of_tag[chart->second].emplace(r.tag, c.series.size()).first;
      c.series.push_back(html::Series{r.tag.empty() ? r.name : r.tag,
                                      html::kPalette[colour % html::kPaletteSize],
                                      colour >= html::kPaletteSize,
                                      {}});
    }
    c.series[series->second].points.push_back(html::Point{r.step, r.value});
    if (r.tag == "training" || r.name.compare(0, 2, "lr") == 0) c.x_label = "iteration";
  }
  return charts;
}

const char kStyle[] = R"css(
:root { --bg: #f3f4f6; --card: #ffffff; --text: #1f2937; --muted: #6b7280; --line: #e5e7eb; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--text);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans",
    "Liberation Sans", "DejaVu Sans", sans-serif; }
header { padding: 22px 28px 6px; }
h1 { font-size: 22px; font-weight: 650; margin: 0 0 2px; overflow-wrap: anywhere; }
.sub { color: var(--muted); margin: 0; }
main { padding: 12px 28px 8px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 480px), 1fr)); gap: 16px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px 12px;
  box-shadow: 0 1px 2px rgba(0, 0, 0, 0.05); min-width: 0; }
.card h2 { font-size: 15px; font-weight: 600; margin: 0 0 4px; overflow-wrap: anywhere; }
.legend { list-style: none; margin: 0 0 6px; padding: 0; display: flex; flex-wrap: wrap; gap: 2px 16px;
  font-size: 13px; }
.legend li { overflow-wrap: anywhere; }
.swatch { display: inline-block; width: 18px; border-top: 3px solid; vertical-align: middle; margin-right: 6px; }
.swatch.dashed { border-top-style: dashed; }
.latest { color: var(--muted); font-variant-numeric: tabular-nums; }
svg.plot { display: block; width: 100%; height: auto; overflow: visible; }
svg.plot text { font-size: 11px; fill: #4b5563; font-variant-numeric: tabular-nums; }
svg.plot .axis-label { font-size: 12px; fill: var(--muted); }
svg.plot .grid line { stroke: #eceef1; stroke-width: 1; }
svg.plot .axis path { stroke: #9ca3af; stroke-width: 1; fill: none; }
svg.plot .line { fill: none; stroke-width: 1.6; stroke-linejoin: round; stroke-linecap: round; }
svg.plot .marker { stroke: #ffffff; stroke-width: 1.2; }
.note { color: var(--muted); font-size: 12px; margin: 4px 0 0; }
.card.timeline { margin-top: 16px; }
svg.timeline { display: block; width: 100%; height: auto; }
svg.timeline text { font-size: 11px; fill: #4b5563; }
svg.timeline .tick { stroke: #eceef1; stroke-width: 1; }
.block { display: inline-block; width: 12px; height: 12px; vertical-align: middle; margin-right: 6px; border-radius: 2px; }
.note.warn { color: #b45309; }
.empty { color: var(--muted); margin: 0; }
.config { margin-top: 16px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 5px 10px 5px 0; border-top: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; white-space: nowrap; width: 1%; padding-right: 24px; }
td { font-family: ui-monospace, "SF Mono", Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono", monospace;
  white-space: pre-wrap; overflow-wrap: anywhere; }
footer { color: var(--muted); font-size: 12px; padding: 8px 28px 24px; }
)css";

}  // namespace

std::string render_html_page(const PageContent& content) {
  const std::string title = html::escape(content.title.empty() ? "kindling training report" : content.title);
  std::string palette;
  // Appends, not `const char* + std::string&&`, which GCC 12 misreads (-Wstringop-overflow).
  for (std::size_t i = 0; i < html::kPaletteSize; ++i) {
    if (i > 0) palette += ',';
    palette += html::kPalette[i];
  }

  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<meta name=\"generator\" content=\"kindling\">\n<meta name=\"kindling-palette\" content=\"" +
      palette + "\">\n<title>" + title + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n<header>\n<h1>" +
      title + "</h1>\n";
  if (!content.footer.empty()) page += "<p class=\"sub\">" + html::escape(content.footer) + "</p>\n";
  page += "</header>\n<main>\n";

  const std::vector<html::Chart> charts = group_charts(content.records);
  if (charts.empty()) {
    page += "<section class=\"card\"><p class=\"empty\">No scalars have been logged yet.</p></section>\n";
  } else {
    page += "<div class=\"grid\">\n";
    for (const html::Chart& chart : charts) page += html::render_chart_card(chart);
    page += "</div>\n";
  }
  page += content.timeline_card;

  page += "<section class=\"card config\">\n<h2>Configuration</h2>\n";
  if (content.config.empty()) {
    page += "<p class=\"empty\">None given.</p>\n";
  } else {
    page += "<table>\n";
    for (const auto& [key, value] : content.config) {
      page += "<tr><th scope=\"row\">" + html::escape(key) + "</th><td>" + html::escape(value) + "</td></tr>\n";
    }
    page += "</table>\n";
  }
  const std::size_t n = content.records.size();
  page += "</section>\n</main>\n<footer>" + std::to_string(n) + (n == 1 ? " value" : " values") + " in " +
          std::to_string(charts.size()) + (charts.size() == 1 ? " chart" : " charts") +
          (n == 0 ? "." : "; every one is in this page's <code>kindling-report-data</code> JSON.");
  page += "</footer>\n<script type=\"application/json\" id=\"kindling-report-data\">\n" + page_json(content) +
          "\n</script>\n</body>\n</html>\n";
  return page;
}

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
