// kindling's log on spdlog: a private logger (not in spdlog's global registry, so a
// program's own spdlog set-up is untouched) writing to stderr, pattern "%v" with the rank
// tag added here, flushed after every line.
#include "kindling/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "common/env.h"
#include "common/identity.h"
#include "common/log_internal.h"
#include "kindling/error.h"

namespace kindling {
namespace {

LogLevel level_from_environment() {
  const auto text = detail::get_env("KINDLING_LOG_LEVEL");
  if (!text || text->empty()) return LogLevel::kInfo;
  try {
    return log_level_from_string(*text);
  } catch (const UsageError& e) {
    throw UsageError(std::string("KINDLING_LOG_LEVEL: ") + e.what());
  }
}

// -1 until the first use reads KINDLING_LOG_LEVEL.
std::atomic<int> g_level{-1};

// Never destroyed: threads may log while the program exits (the flight recorder's SIGUSR1
// dump, engines' threads), after static destructors have begun.
spdlog::logger& logger() {
  static spdlog::logger* const instance = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto* made = new spdlog::logger("kindling", std::move(sink));
    made->set_pattern("%v");
    made->set_level(spdlog::level::trace);  // filtering happens in log() against g_level
    made->flush_on(spdlog::level::trace);
    return made;
  }();
  return *instance;
}

}  // namespace

LogLevel log_level() {
  int v = g_level.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(level_from_environment());
    int expected = -1;
    if (!g_level.compare_exchange_strong(expected, v)) v = expected;
  }
  return static_cast<LogLevel>(v);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel log_level_from_string(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "trace") return LogLevel::kTrace;
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  if (lower == "critical") return LogLevel::kCritical;
  if (lower == "off") return LogLevel::kOff;
  throw UsageError("'" + name + "' is not a log level; use trace, debug, info, warning, error, critical or off");
}

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kCritical: return "critical";
    case LogLevel::kOff: return "off";
  }
  return "info";
}

void log(LogLevel level, const std::string& message) {
  if (level == LogLevel::kOff || level < log_level()) return;
  try {
    logger().log(detail::to_spdlog(level), "{}{}", detail::log_rank_tag(), message);
  } catch (const std::exception&) {
    // Logging must not take the program down (a closed stderr, say).
  }
}

namespace detail {

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarning: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kCritical: return spdlog::level::critical;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

LogLevel from_spdlog(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return LogLevel::kTrace;
    case spdlog::level::debug: return LogLevel::kDebug;
    case spdlog::level::info: return LogLevel::kInfo;
    case spdlog::level::warn: return LogLevel::kWarning;
    case spdlog::level::err: return LogLevel::kError;
    case spdlog::level::critical: return LogLevel::kCritical;
    default: return LogLevel::kOff;
  }
}

std::string log_rank_tag(bool relayed) {
  try {
    const auto who = process_identity();
    if (!who) return {};
    const std::string rank_of_world = std::to_string(who->first) + "/" + std::to_string(who->second);
    // kindling-run already wrote "[rank<r>]: " in front of the line for this rank of this world
    // (supervisor/spawn.cpp); after a live recovery made the process another rank, both show.
    if (relayed && get_env("KINDLING_OUTPUT_RANK_PREFIXED") == rank_of_world) return {};
    return "[rank " + rank_of_world + "] ";
  } catch (const std::exception&) {
    return {};  // inconsistent launcher variables: initialize() names them; a line is still written
  }
}

}  // namespace detail

}  // namespace kindling
