#pragma once
// Small file and clock helpers the handler tests share.
#include <stdlib.h>

#include <chrono>
#include <string>

namespace kindling {
namespace testing {

/// A new empty folder /tmp/kindling-<tag>-XXXXXX (mkdtemp); the caller removes it.
inline std::string make_temp_dir(const std::string& tag) {
  std::string pattern = "/tmp/kindling-" + tag + "-XXXXXX";
  return mkdtemp(pattern.data());
}

/// Seconds since the Unix epoch (system clock), as logged wall times are written.
inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace testing
}  // namespace kindling
