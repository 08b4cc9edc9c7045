// torchelastic error files (see error_file.h). Written through the library's one whole-file
// writer (files.h's replace_file: temporary file, fsync, rename, fsync of the folder), so that a
// launcher reading the file after the worker died finds all of it or nothing.
#include "common/error_file.h"

#include <unistd.h>

#include <chrono>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/files.h"
#include "kindling/log.h"

namespace kindling {
namespace detail {

bool write_error_file(const std::string& path, const std::string& type, const std::string& message) {
  try {
    const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
    const long long now = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    const long long now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count();
    nlohmann::json data;
    data["message"]["message"] = type + ": " + message;
    // torchrun prints py_callstack as the failure's "traceback": a C++ program has no Python
    // stack, so the message itself goes there.
    data["message"]["extraInfo"]["py_callstack"] = type + ": " + message;
    data["message"]["extraInfo"]["timestamp"] = std::to_string(now);
    // torchelastic's timestamp has whole seconds: two ranks that fail within one second tie, and
    // the launcher's "first failure" would be a guess.
    data["message"]["extraInfo"]["kindling_time_ns"] = std::to_string(now_ns);
    // Invalid UTF-8 in a message is replaced rather than refused: the file must be written.
    const std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string temp = path + ".tmp." + std::to_string(::getpid());
    replace_file(path, temp, text.data(), text.size(), "kindling::dist::record_error");
    return true;
  } catch (const std::exception& e) {
    // Failure paths call this: the reason goes to the log, and the launcher falls back to the
    // exit code.
    kindling::log(LogLevel::kWarning,
                  std::string(e.what()) + "; the launcher will know this failure by its exit code only");
    return false;
  } catch (...) {
    return false;
  }
}

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    auto data = nlohmann::json::parse(in);
    ErrorRecord record;
    const auto& message = data.at("message");
    if (message.is_string()) {
      record.message = message.get<std::string>();
      if (data.contains("timestamp")) record.timestamp = std::stoll(data["timestamp"].dump());
    } else {
      record.message = message.at("message").get<std::string>();
      const auto& extra = message.at("extraInfo");
      const auto& stamp = extra.at("timestamp");
      record.timestamp = stamp.is_string() ? std::stoll(stamp.get<std::string>()) : stamp.get<long long>();
      if (extra.contains("kindling_time_ns")) record.time_ns = std::stoll(extra["kindling_time_ns"].get<std::string>());
    }
    if (record.time_ns == 0) record.time_ns = record.timestamp * 1000000000LL;
    return record;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace detail
}  // namespace kindling
