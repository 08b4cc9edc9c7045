#pragma once
/// \file
/// ProgressBar (ignite's, after tqdm): on rank 0, one line per epoch with the iteration
/// count, percentage, a bar, chosen metrics / output values, elapsed time, ETA and rate:
///
///   Epoch [2/5]: [120/469]  26%|██▌       | loss=0.3521 [00:04<00:12, 27.61it/s]
///
/// On a terminal the line is redrawn in place and, at the end of each epoch, kept (persist)
/// or cleared; under kindling-run and Parallel a rank whose output the launcher relays to its
/// own terminal counts as on a terminal (the launcher relays the redraws as they come). When
/// stderr is not a terminal (a log file, CI) it prints a whole line every `every` iterations
/// of the epoch and at the end of the epoch instead of redrawing: a line whenever an update
/// finds the epoch's count past the next multiple of `every`, so an update event filtered on
/// its own (ITERATION_COMPLETED.every(n) counts over the whole run) still prints in every epoch.
///
/// \code
///   auto bar =
///   std::make_shared<kindling::handlers::ProgressBar>(kindling::handlers::ProgressBarOptions().persist(true));
///   bar->attach(trainer, {"running_loss"});
/// \endcode
///
/// Ranks: every rank may construct and attach it; only rank 0 writes. Local: no communication.

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace handlers {

/// Options of ProgressBar (chain the setters).
struct KINDLING_API ProgressBarOptions {
  /// Keep each epoch's finished line on a terminal (default false: cleared, as ignite).
  KINDLING_ARG(bool, persist) = false;

  /// Characters of the bar itself (default 10).
  KINDLING_ARG(int, bar_width) = 10;

  /// Without a terminal: print a line every this many iterations of the epoch (default 100).
  KINDLING_ARG(int64_t, every) = 100;

  /// Draw the bar with '#' instead of Unicode blocks (default: blocks when the locale is UTF-8).
  KINDLING_ARG(std::optional<bool>, ascii);

  /// Where to write (default stderr).
  KINDLING_ARG(std::FILE*, stream) = stderr;

  /// Treat the stream as a terminal or not (default: isatty on it, or the launcher says it
  /// relays the stream to a terminal: KINDLING_STDERR_TERMINAL / KINDLING_STDOUT_TERMINAL=1).
  KINDLING_ARG(std::optional<bool>, terminal);
};

class KINDLING_API ProgressBar : public std::enable_shared_from_this<ProgressBar> {
 public:
  /// Throws kindling::UsageError for a bar_width < 1 or every < 1.
  explicit ProgressBar(ProgressBarOptions options = ProgressBarOptions());
  /// Shows the progress of `engine`: updated on `event` (ITERATION_COMPLETED), the epoch's
  /// line closed on `closing_event` (EPOCH_COMPLETED). `metric_names` are read from
  /// engine.state().metrics when present; output_transform maps the output to named numbers
  /// (e.g. {"loss": output.number()}). The engine keeps the bar alive (keep_alive.h): it must
  /// be owned by a std::shared_ptr, else kindling::UsageError.
  void attach(engine::Engine& engine, std::vector<std::string> metric_names = {},
              std::function<std::map<std::string, double>(const engine::Value&)> output_transform = {},
              const engine::Event& event = engine::Events::ITERATION_COMPLETED,
              const engine::Event& closing_event = engine::Events::EPOCH_COMPLETED);
  /// Writes a message on its own line without breaking the bar (tqdm.write, as ignite calls
  /// it): on stdout while the bar is on stderr (the default), else on the bar's stream. Rank 0
  /// only (other ranks write nothing). Does not throw.
  void log_message(const std::string& message);
  /// The current line (without control characters), for tests and logs.
  std::string line() const { return line_; }

 private:
  void update(engine::Engine& engine);
  void close(engine::Engine& engine);
  std::string render(engine::Engine& engine) const;
  void draw();

  ProgressBarOptions options_;
  bool terminal_ = false;
  bool ascii_ = true;
  bool writes_ = false;
  std::vector<std::string> metric_names_;
  std::function<std::map<std::string, double>(const engine::Value&)> output_transform_;
  std::chrono::steady_clock::time_point epoch_start_;
  int64_t start_iteration_ = 0;
  int64_t printed_ = 0;  // the epoch's count at the last line printed (no terminal)
  bool open_ = false;
  std::string line_;
};

}  // namespace handlers
}  // namespace kindling
