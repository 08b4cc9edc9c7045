// setup_logger on spdlog. spdlog is linked PRIVATE to kindling (CMakeLists.txt), so no spdlog
// type appears in the public header: Logger hides its spdlog::logger behind Impl. Each call
// makes its own spdlog::logger, kept out of spdlog's global registry (as kindling's log in
// src/common/log.cpp), so a program's own spdlog set-up is untouched.
#include "common/log_internal.h"
#include "kindling/handlers/loggers/setup_logger.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <utility>
#include <vector>

#include "common/env.h"
#include "handlers/loggers/tensorboard/event_file.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {

struct Logger::Impl {
  std::string name;
  bool silenced = false;
  std::shared_ptr<spdlog::logger> logger;
};

namespace {

const char* const kWhere = "kindling::handlers::setup_logger";
// Pattern flags of our own (spdlog looks user flags up before its built-in ones).
constexpr char kRankFlag = '*';
constexpr char kLevelNameFlag = '~';

// Python logging's level names (ignite's %(levelname)s).
const char* python_level_name(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return "TRACE";
    case spdlog::level::debug: return "DEBUG";
    case spdlog::level::info: return "INFO";
    case spdlog::level::warn: return "WARNING";
    case spdlog::level::err: return "ERROR";
    case spdlog::level::critical: return "CRITICAL";
    default: return "NOTSET";
  }
}

void append_text(spdlog::memory_buf_t& dest, const std::string& text) {
  dest.append(text.data(), text.data() + text.size());
}

// The rank tag, computed at each line (the rank is known only after initialize). On stderr
// (`relayed`) it is left out where kindling-run's relay already tags the line; a file keeps it.
class RankTagFlag final : public spdlog::custom_flag_formatter {
 public:
  explicit RankTagFlag(bool relayed) : relayed_(relayed) {}
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    append_text(dest, kindling::detail::log_rank_tag(relayed_));
  }
  std::unique_ptr<spdlog::custom_flag_formatter> clone() const override {
    return std::make_unique<RankTagFlag>(relayed_);
  }

 private:
  bool relayed_;
};

// %(levelname)s, padded by hand (spdlog's padder is internal to it; user flags get only the spec).
class LevelNameFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string name = python_level_name(msg.level);
    const std::size_t width = padinfo_.enabled() ? padinfo_.width_ : 0;
    const std::string padding(width > name.size() ? width - name.size() : 0, ' ');
    const bool pad_after = padinfo_.side_ == spdlog::details::padding_info::pad_side::right;
    append_text(dest, pad_after ? name + padding : padding + name);
  }
  std::unique_ptr<spdlog::custom_flag_formatter> clone() const override { return std::make_unique<LevelNameFlag>(); }
};

// ignite's (Python logging's) %-format as an spdlog pattern, after the rank tag's flag.
std::string to_pattern(const std::string& format) {
  std::string pattern = {'%', kRankFlag};
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      pattern += format[i];
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '%') {
      pattern += "%%";
      ++i;
      continue;
    }
    KINDLING_CHECK(i + 1 < format.size() && format[i + 1] == '(', kWhere, ": the format \"", format,
                   "\" has a '%' at position ", i, " that starts neither %(key)s nor %%; write %% for a literal '%'");
    const std::size_t close = format.find(')', i + 2);
    KINDLING_CHECK(close != std::string::npos, kWhere, ": the format \"", format, "\" has a '%(' at position ", i,
                   " without its ')'; write e.g. %(message)s");
    const std::string key = format.substr(i + 2, close - i - 2);
    std::size_t j = close + 1;
    const bool pad_after = j < format.size() && format[j] == '-';
    if (pad_after) ++j;
    std::string width;
    while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) width += format[j++];
    KINDLING_CHECK(j < format.size() && (format[j] == 's' || format[j] == 'd'), kWhere, ": the format \"", format,
                   "\" has %(", key, ") without its conversion letter; write %(", key,
                   ")s (a width may come before the s, as in %(levelname)-8s)");
    if (key == "asctime") {
      KINDLING_CHECK(width.empty(), kWhere, ": the format \"", format,
                     "\" gives %(asctime)s a width, which kindling does not support; remove the width");
      pattern += "%Y-%m-%d %H:%M:%S,%e";
    } else {
      const char flag = key == "name"        ? 'n'
                        : key == "levelname" ? kLevelNameFlag
                        : key == "message"   ? 'v'
                        : key == "process"   ? 'P'
                        : key == "thread"    ? 't'
                                             : '\0';
      KINDLING_CHECK(flag != '\0', kWhere, ": the format \"", format, "\" has the key '", key,
                     "'; the keys kindling fills in are asctime, name, levelname, message, process and thread");
      pattern += '%';
      if (!width.empty()) pattern += (pad_after ? "-" : "") + width;
      pattern += flag;
    }
    i = j;
  }
  return pattern;
}

}  // namespace

Logger setup_logger(const std::string& name, LogLevel level, const std::string& format,
                    const std::optional<std::string>& filepath, std::optional<int> distributed_rank) {
  const std::string pattern = to_pattern(format);  // checked on every rank, silenced or not
  KINDLING_CHECK(!filepath || !filepath->empty(), kWhere,
                 ": filepath is an empty string; give a file path, or std::nullopt for stderr only");
  auto impl = std::make_shared<Logger::Impl>();
  impl->name = name;
  impl->silenced = (distributed_rank ? *distributed_rank : detail::this_rank()) != 0;  // default: this process's
  std::vector<spdlog::sink_ptr> sinks;
  if (!impl->silenced) {
    sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
    if (filepath) {
      try {
        sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(*filepath));  // appends, makes dirs
      } catch (const spdlog::spdlog_ex& e) {
        KINDLING_CHECK_T(Error, false, kWhere, ": cannot open the log file ", *filepath, " (", e.what(),
                         "); check the path and its permissions");
      }
    }
  }
  impl->logger = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
  for (std::size_t i = 0; i < sinks.size(); ++i) {  // sinks[0]: stderr, relayed by a launcher
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<RankTagFlag>(kRankFlag, i == 0).add_flag<LevelNameFlag>(kLevelNameFlag).set_pattern(pattern);
    sinks[i]->set_formatter(std::move(formatter));
  }
  impl->logger->set_level(impl->silenced ? spdlog::level::off : kindling::detail::to_spdlog(level));
  impl->logger->flush_on(spdlog::level::trace);  // every line reaches the file at once
  return Logger(std::move(impl));
}

void Logger::log(LogLevel level, const std::string& message) const {
  if (!is_enabled_for(level)) return;
  try {
    impl_->logger->log(kindling::detail::to_spdlog(level), "{}", message);
  } catch (const std::exception&) {
    // Logging must not take the program down (a closed stderr, a full disk).
  }
}

bool Logger::is_enabled_for(LogLevel level) const {
  return !impl_->silenced && level != LogLevel::kOff && impl_->logger->should_log(kindling::detail::to_spdlog(level));
}

LogLevel Logger::level() const {
  return impl_->silenced ? LogLevel::kOff : kindling::detail::from_spdlog(impl_->logger->level());
}

void Logger::set_level(LogLevel level) {
  if (!impl_->silenced) impl_->logger->set_level(kindling::detail::to_spdlog(level));
}

bool Logger::silenced() const { return impl_->silenced; }

const std::string& Logger::name() const { return impl_->name; }

Logger::operator engine::EngineLogger() const {
  const Logger self = *this;  // shares impl_, so later set_level() calls apply
  return engine::EngineLogger([self](LogLevel level, const std::string& message) { self.log(level, message); },
                              [self](LogLevel level) { return self.is_enabled_for(level); });
}

}  // namespace handlers
}  // namespace kindling
