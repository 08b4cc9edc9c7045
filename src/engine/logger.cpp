// kindling::engine::EngineLogger: the default writes through kindling's log, with rank 0's
// INFO lines kept and other ranks' lowered to DEBUG; quiet() lowers them on every rank.
#include "kindling/engine/logger.h"

#include <exception>
#include <utility>

#include "common/identity.h"
#include "kindling/error.h"

namespace kindling {
namespace engine {

namespace {

// This process's rank by the one rule (common/identity.h: the distributed model's, else the
// launcher's variables, else 0). Read at each line (the engine logs a few lines per epoch), so
// that it follows initialize().
int default_logger_rank() {
  try {
    return kindling::detail::process_rank();
  } catch (const std::exception&) {
    return 0;  // an inconsistent environment: initialize() reports it
  }
}

// The level a line of the default logger is written at on this rank (`quiet`: INFO at DEBUG
// on every rank).
LogLevel default_level_on_this_rank(LogLevel level, bool quiet) {
  if (level == LogLevel::kInfo && (quiet || default_logger_rank() != 0)) return LogLevel::kDebug;
  return level;
}

EngineLogger::Write default_write(bool quiet) {
  return [quiet](LogLevel level, const std::string& message) {
    kindling::log(default_level_on_this_rank(level, quiet), message);
  };
}

EngineLogger::Enabled default_enabled(bool quiet) {
  return [quiet](LogLevel level) {
    const LogLevel threshold = kindling::log_level();
    return threshold != LogLevel::kOff && default_level_on_this_rank(level, quiet) >= threshold;
  };
}

}  // namespace

EngineLogger::EngineLogger() : write_(default_write(false)), enabled_(default_enabled(false)) {}

EngineLogger EngineLogger::quiet() { return EngineLogger(default_write(true), default_enabled(true)); }

EngineLogger::EngineLogger(Write write, Enabled enabled) : write_(std::move(write)), enabled_(std::move(enabled)) {
  KINDLING_CHECK(static_cast<bool>(write_) && static_cast<bool>(enabled_),
                 "kindling::engine::EngineLogger: the write and enabled functions must both be given (got ",
                 write_ ? "write" : "no write", " and ", enabled_ ? "enabled" : "no enabled",
                 "); leave the default logger in place, or convert a kindling::handlers::Logger");
}

void EngineLogger::log(LogLevel level, const std::string& message) const {
  if (is_enabled_for(level)) write_(level, message);
}

bool EngineLogger::is_enabled_for(LogLevel level) const { return level != LogLevel::kOff && enabled_(level); }

}  // namespace engine
}  // namespace kindling
