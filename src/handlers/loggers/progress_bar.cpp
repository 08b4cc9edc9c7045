// ProgressBar: tqdm's line format, redrawn in place on a terminal, printed every N
// iterations elsewhere. Written by hand: no C++ progress-bar library is packaged in Debian.
#include "kindling/handlers/loggers/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kindling/dist/dist.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {
namespace {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>((s / 60) % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(text, sizeof(text), "%02lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return text;
}

bool utf8_locale() {
  for (const char* name : {"LC_ALL", "LC_CTYPE", "LANG"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::strstr(v, "UTF-8") != nullptr || std::strstr(v, "utf8") != nullptr;
  }
  return false;
}

std::string short_number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", v);
  return text;
}

// A terminal, or the stdout / stderr that a launcher (kindling-run, Parallel) relays to its
// own terminal as it comes (it sets KINDLING_STDOUT_TERMINAL / KINDLING_STDERR_TERMINAL).
bool reaches_terminal(FILE* stream) {
  if (::isatty(::fileno(stream)) == 1) return true;
  const char* relayed = stream == stderr ? std::getenv("KINDLING_STDERR_TERMINAL")
                                         : stream == stdout ? std::getenv("KINDLING_STDOUT_TERMINAL") : nullptr;
  return relayed != nullptr && std::strcmp(relayed, "1") == 0;
}

}  // namespace

ProgressBar::ProgressBar(ProgressBarOptions options) : options_(options) {
  KINDLING_CHECK(options_.bar_width() >= 1, "kindling::handlers::ProgressBar: bar_width must be at least 1, got ",
                 options_.bar_width());
  KINDLING_CHECK(options_.every() >= 1, "kindling::handlers::ProgressBar: every must be at least 1, got ",
                 options_.every());
  KINDLING_CHECK(options_.stream() != nullptr, "kindling::handlers::ProgressBar: the stream is null");
  terminal_ = options_.terminal().value_or(reaches_terminal(options_.stream()));
  ascii_ = options_.ascii().value_or(!utf8_locale());
}

void ProgressBar::attach(engine::Engine& engine, std::vector<std::string> metric_names,
                         std::function<std::map<std::string, double>(const engine::Value&)> output_transform,
                         const engine::Event& event, const engine::Event& closing_event) {
  auto self = engine::keep_alive(*this, "kindling::handlers::ProgressBar");
  writes_ = dist::get_rank() == 0;
  metric_names_ = std::move(metric_names);
  output_transform_ = std::move(output_transform);
  engine.add_event_handler(engine::Events::EPOCH_STARTED, [self](engine::Engine& e) {
    self->epoch_start_ = std::chrono::steady_clock::now();
    self->start_iteration_ = e.state().iteration;
    self->printed_ = 0;
  });
  engine.add_event_handler(event, [self](engine::Engine& e) { self->update(e); });
  engine.add_event_handler(closing_event, [self](engine::Engine& e) { self->close(e); });
}

std::string ProgressBar::render(engine::Engine& engine) const {
  const auto& s = engine.state();
  const int64_t len = s.epoch_length.value_or(0);
  const int64_t done = len > 0 ? s.iteration - (s.epoch - 1) * len : s.iteration - start_iteration_;
  std::string out;
  // Appends, not `const char* + std::string&&`, which GCC 12 misreads (-Wstringop-overflow).
  if (s.max_epochs && *s.max_epochs > 1) {
    out += "Epoch [";
    out += std::to_string(s.epoch);
    out += '/';
    out += std::to_string(*s.max_epochs);
    out += "]: ";
  }
  out += '[';
  out += std::to_string(done);
  out += '/';
  out += len > 0 ? std::to_string(len) : std::string("?");
  out += ']';
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
  const int64_t counted = std::max<int64_t>(0, s.iteration - start_iteration_);
  const double rate = elapsed > 0 ? static_cast<double>(counted) / elapsed : 0.0;
  if (len > 0) {
    const double fraction = std::min(1.0, static_cast<double>(done) / static_cast<double>(len));
    char pct[16];
    std::snprintf(pct, sizeof(pct), " %3d%%|", static_cast<int>(fraction * 100.0));
    out += pct;
    const double cells = fraction * options_.bar_width();
    const int full = static_cast<int>(cells);
    static const char* kPartial[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    for (int i = 0; i < full; ++i) out += ascii_ ? "#" : "█";
    int used = full;
    if (full < options_.bar_width()) {
      const int eighth = static_cast<int>((cells - full) * 8);
      if (!ascii_ && eighth > 0) {
        out += kPartial[eighth];
        ++used;
      }
    }
    out += std::string(static_cast<std::size_t>(options_.bar_width() - used), ' ') + "|";
  }
  std::vector<std::pair<std::string, double>> values;
  for (const auto& name : metric_names_) {
    auto it = s.metrics.find(name);
    if (it != s.metrics.end() &&
        (it->second.is_number() || (it->second.is_tensor() && it->second.tensor().numel() == 1)))
      values.emplace_back(name, it->second.number());
  }
  if (output_transform_) {
    for (const auto& kv : output_transform_(s.output)) values.emplace_back(kv.first, kv.second);
  }
  std::string shown;
  for (const auto& [name, v] : values) shown += (shown.empty() ? " " : ", ") + name + "=" + short_number(v);
  out += shown;
  const double eta = (len > 0 && rate > 0) ? static_cast<double>(len - done) / rate : -1;
  char tail[64];
  std::snprintf(tail, sizeof(tail), " [%s<%s, %.2fit/s]", clock_text(elapsed).c_str(),
                len > 0 ? clock_text(eta).c_str() : "?", rate);
  return out + tail;
}

void ProgressBar::draw() {
  std::string text = "\r" + line_ + "\x1b[K";
  std::fwrite(text.data(), 1, text.size(), options_.stream());
  std::fflush(options_.stream());
}

void ProgressBar::update(engine::Engine& engine) {
  if (!writes_) return;
  line_ = render(engine);
  open_ = true;
  const auto& s = engine.state();
  const int64_t len = s.epoch_length.value_or(0);
  const int64_t done = len > 0 ? s.iteration - (s.epoch - 1) * len : s.iteration - start_iteration_;
  if (terminal_) {
    draw();
  } else if (done / options_.every() > printed_ / options_.every() && done != len) {
    // Counted within the epoch, as ignite's bar counts its steps: a line whenever the count
    // passed a multiple of `every` since the last line, so that an update event with a filter
    // of its own (ITERATION_COMPLETED.every(n), counted over the whole run) still prints in
    // every epoch, not only where both counts meet.
    printed_ = done;
    std::fprintf(options_.stream(), "%s\n", line_.c_str());
    std::fflush(options_.stream());
  }
}

void ProgressBar::close(engine::Engine& engine) {
  if (!writes_ || !open_) return;
  line_ = render(engine);
  open_ = false;
  if (terminal_) {
    if (options_.persist()) {
      draw();
      std::fputs("\n", options_.stream());
    } else {
      std::fputs("\r\x1b[K", options_.stream());
    }
  } else {
    std::fprintf(options_.stream(), "%s\n", line_.c_str());
  }
  std::fflush(options_.stream());
}

// tqdm.write(message, file=None), as ignite calls it: the message goes to stdout while the bar
// is on stderr (the default), else to the bar's stream; the bar's line is cleared first and
// drawn again after it.
void ProgressBar::log_message(const std::string& message) {
  if (dist::get_rank() != 0) return;
  std::FILE* bar = options_.stream();
  std::FILE* out = bar == stderr ? stdout : bar;
  if (terminal_ && open_) {
    std::fputs("\r\x1b[K", bar);
    std::fflush(bar);
  }
  std::fprintf(out, "%s\n", message.c_str());
  std::fflush(out);
  if (terminal_ && open_) draw();
  std::fflush(bar);
}

}  // namespace handlers
}  // namespace kindling
