#pragma once
/// \file
/// kindling's log: what the library reports on stderr (banners, option dumps, warnings,
/// errors it cannot throw), one line per call, with a level that filters it.
///
/// \code
///   kindling::set_log_level(kindling::LogLevel::kWarning);   // or KINDLING_LOG_LEVEL=warning
///   kindling::log(kindling::LogLevel::kInfo, "my_app: epoch 3 done");   // not shown now
/// \endcode
///
/// Every line written by a rank of a distributed run starts with "[rank r/w] " (from the
/// distributed model, or before initialize from the launcher's variables as
/// kindling::dist::detect_launch_environment reads them: RANK / WORLD_SIZE, mpirun's, srun's,
/// ...; no tag when they are inconsistent). A line is written with one call to the stream,
/// so lines of several ranks sharing a terminal or pipe do not interleave mid-line.

#include <string>

#include "kindling/export.h"

namespace kindling {

/// Severity of a log line, lowest first; kOff as a threshold silences everything.
enum class LogLevel { kTrace, kDebug, kInfo, kWarning, kError, kCritical, kOff };

/// The threshold: lines below it are dropped. Initially KINDLING_LOG_LEVEL (trace, debug,
/// info, warning, error, critical or off; default info). Throws kindling::UsageError,
/// on the first log line or call here, when KINDLING_LOG_LEVEL holds anything else.
/// Any thread of any rank may call it; it affects this process only.
KINDLING_API LogLevel log_level();

/// Sets the threshold for this process (overrides KINDLING_LOG_LEVEL). Any thread may call it.
KINDLING_API void set_log_level(LogLevel level);

/// "trace", "debug", "info", "warning" (or "warn"), "error", "critical", "off", any case.
/// Throws kindling::UsageError naming the accepted words for anything else.
KINDLING_API LogLevel log_level_from_string(const std::string& name);

/// The lower-case name of `level` ("warning" for kWarning).
KINDLING_API const char* to_string(LogLevel level);

/// Writes `message` as one line to stderr, tagged with the rank, when `level` passes the
/// threshold. Never throws for I/O problems. Any thread of any rank may call it.
KINDLING_API void log(LogLevel level, const std::string& message);

}  // namespace kindling
