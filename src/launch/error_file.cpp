// torchelastic error files, the reading side (see error_file.h): in kindling_supervisor, which
// kindling-run links without the rest of the library. The writing side, which needs
// common/files.h, is error_file_write.cpp, in the library.
#include "launch/error_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace kindling {
namespace launch {

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

}  // namespace launch
}  // namespace kindling
