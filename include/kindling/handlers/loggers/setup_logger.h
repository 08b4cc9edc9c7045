#pragma once
/// \file
/// kindling::handlers::setup_logger: ignite's setup_logger (ignite.utils) for a program's own
/// log lines: a named logger with a level and a format, writing to stderr and, optionally,
/// appending to a file, silenced on ranks other than 0.
///
/// \code
///   auto logger = kindling::handlers::setup_logger("trainer", kindling::LogLevel::kInfo);
///   logger.info("epoch 1: loss 0.25");
///   // stderr: [rank 0/2] 2024-06-01 12:00:00,123 trainer INFO: epoch 1: loss 0.25
/// \endcode
///
/// A line is "[rank r/w] " (as kindling's own log: the distributed model's rank and world
/// size, before kindling::dist::initialize the launcher's, nothing in a plain single
/// process) followed by `format` filled in. `format` is ignite's (Python logging's) syntax,
/// with these keys: %(asctime)s ("2024-06-01 12:00:00,123", local time),
/// %(name)s, %(levelname)s (DEBUG, INFO, WARNING, ERROR, CRITICAL; TRACE for kTrace),
/// %(message)s, %(process)d, %(thread)d; a width pads as in Python ("%(levelname)-8s" pads on
/// the right, "%(levelname)8s" on the left; not for asctime); "%%" is a literal '%'.
///
/// Ranks (ignite's rule): `distributed_rank` is the rank this process counts as, by default
/// its own (kindling::dist::get_rank() once initialized, else the launcher's variables as
/// kindling::dist::detect_launch_environment reads them, else 0). Only when it is 0 does the
/// logger write, to stderr and to `filepath`; otherwise it is silenced: it has no output at
/// all (neither stderr nor the file, which it does not even open) and level() is kOff, as
/// ignite gives non-zero ranks only a NullHandler. So `distributed_rank = 0` on every rank
/// makes every rank write, and `distributed_rank = 1` on rank 0 silences it. Nothing here
/// communicates.
///
/// Unlike Python's logging.getLogger, loggers are not kept in a registry by name: each call
/// makes a new logger (ignite's `reset` therefore has no counterpart); copies of a Logger
/// share it. kindling's own log (kindling/log.h) is separate and unaffected.

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kindling/engine/logger.h"
#include "kindling/export.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

/// ignite's default format.
inline constexpr const char kDefaultLogFormat[] = "%(asctime)s %(name)s %(levelname)s: %(message)s";

class Logger;

/// Makes a logger named `name` writing lines at `level` or above (see the file comment for
/// the format, the file and the ranks). The file is opened for appending (created, with its
/// missing directories, when absent) and every line is flushed as it is written. Throws
/// kindling::UsageError for a `format` with a key other than those listed, a '%' that starts
/// neither "%(key)" nor "%%", a key without its conversion letter (s or d) or a width on
/// asctime, an empty `filepath`, or, with no `distributed_rank`, inconsistent launcher
/// variables before initialize (a RANK that is not an integer, RANK without WORLD_SIZE; on
/// every rank), and kindling::Error when the file cannot be opened (writing rank).
KINDLING_API Logger setup_logger(const std::string& name, LogLevel level = LogLevel::kInfo,
                                 const std::string& format = kDefaultLogFormat,
                                 const std::optional<std::string>& filepath = std::nullopt,
                                 std::optional<int> distributed_rank = std::nullopt);

/// A logger made by setup_logger. Copies share the same outputs. Methods may be called from
/// any thread; each line is written whole (one write per output) and flushed. They never
/// throw for output problems (spdlog reports a failing write on stderr).
class KINDLING_API Logger {
 public:
  /// Write `message` at that level when it passes the threshold.
  void trace(const std::string& message) const { log(LogLevel::kTrace, message); }
  void debug(const std::string& message) const { log(LogLevel::kDebug, message); }
  void info(const std::string& message) const { log(LogLevel::kInfo, message); }
  void warning(const std::string& message) const { log(LogLevel::kWarning, message); }
  void error(const std::string& message) const { log(LogLevel::kError, message); }
  void critical(const std::string& message) const { log(LogLevel::kCritical, message); }
  /// Writes `message` when `level` passes the threshold (kOff never does).
  void log(LogLevel level, const std::string& message) const;

  /// Whether a line at `level` would be written (ignite's isEnabledFor); false when silenced.
  bool is_enabled_for(LogLevel level) const;
  /// The threshold; kOff when silenced.
  LogLevel level() const;
  /// Changes the threshold of this logger and its copies; ignored when silenced (a silenced
  /// logger has no output to enable).
  void set_level(LogLevel level);
  /// Whether this logger was silenced (its distributed_rank was not 0).
  bool silenced() const;
  const std::string& name() const;
  /// This logger as an engine's logger (`trainer.logger = setup_logger("trainer");`, as
  /// ignite's tutorial): the engine's lines then follow this logger's level, format, file
  /// and ranks. The engine shares it (a copy).
  operator engine::EngineLogger() const;  // NOLINT(google-explicit-constructor): ignite's assignment

 private:
  struct Impl;
  explicit Logger(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  friend Logger setup_logger(const std::string& name, LogLevel level, const std::string& format,
                             const std::optional<std::string>& filepath, std::optional<int> distributed_rank);
  std::shared_ptr<Impl> impl_;
};

}  // namespace handlers
}  // namespace kindling
