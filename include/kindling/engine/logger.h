#pragma once
/// \file
/// kindling::engine::EngineLogger: where an Engine's own lines go (ignite's `engine.logger`):
/// "trainer run starting with max_epochs=5.", "trainer: Epoch[1] Complete. Time taken:
/// 00:00:12.345", "trainer run complete. Time taken: 00:01:01.724" at INFO, terminate and
/// interrupt requests at INFO, a run ended by an exception at ERROR.
///
/// \code
///   Engine trainer(step);
///   trainer.name = "trainer";                                  // the name in the lines
///   trainer.logger = kindling::handlers::setup_logger("trainer");   // as ignite's tutorial
///   kindling::set_log_level(kindling::LogLevel::kWarning);     // silences the default logger
/// \endcode
///
/// The default logger writes through kindling's log (kindling/log.h), so KINDLING_LOG_LEVEL
/// or set_log_level() silence it. Ranks: on rank 0 (the distributed model's rank, before
/// kindling::dist::initialize the launcher's: RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, ...;
/// else 0) a line keeps its level; on
/// the other ranks INFO lines are written at DEBUG, so a job of many ranks prints each
/// epoch's line once unless the log level is debug. Warnings and errors are written on every
/// rank. A logger made by kindling::handlers::setup_logger converts to an EngineLogger and then
/// follows that logger's own rules (its level, its format, only rank 0 by default).
/// Nothing here communicates.

#include <functional>
#include <string>

#include "kindling/export.h"
#include "kindling/log.h"

namespace kindling {
namespace engine {

class KINDLING_API EngineLogger {
 public:
  /// Writes one line at a level (called only when `Enabled` said yes).
  using Write = std::function<void(LogLevel level, const std::string& message)>;
  /// Whether a line at a level would be written.
  using Enabled = std::function<bool(LogLevel level)>;

  /// The default logger: kindling's log, with the rank rule of the file comment.
  EngineLogger();
  /// The default logger with its INFO lines written at DEBUG on every rank: the logger of
  /// create_supervised_evaluator's engines. An evaluator runs once or twice per training epoch
  /// and ignite's prints nothing at the default level, so at INFO only the trainer's lines show;
  /// KINDLING_LOG_LEVEL=debug (or assigning setup_logger("evaluator")) shows the evaluator's.
  /// Warnings and errors keep their level. Local; does not throw.
  static EngineLogger quiet();
  /// A logger of your own: `write` gets each line that `enabled` accepts. Throws
  /// kindling::UsageError when either is empty.
  EngineLogger(Write write, Enabled enabled);

  /// Writes `message` at `level` when the logger is enabled for it. Never throws for output
  /// problems; rethrows what a user's `write` throws.
  void log(LogLevel level, const std::string& message) const;
  void debug(const std::string& message) const { log(LogLevel::kDebug, message); }
  void info(const std::string& message) const { log(LogLevel::kInfo, message); }
  void warning(const std::string& message) const { log(LogLevel::kWarning, message); }
  void error(const std::string& message) const { log(LogLevel::kError, message); }
  /// Whether a line at `level` would be written (ignite's isEnabledFor).
  bool is_enabled_for(LogLevel level) const;

 private:
  Write write_;
  Enabled enabled_;
};

}  // namespace engine
}  // namespace kindling
