#pragma once
// Small file and clock helpers the tests share.
#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace kindling {
namespace testing {

/// A new empty folder /tmp/kindling-<tag>-XXXXXX (mkdtemp); the caller removes it.
inline std::string make_temp_dir(const std::string& tag) {
  std::string pattern = "/tmp/kindling-" + tag + "-XXXXXX";
  return mkdtemp(pattern.data());
}

/// The names in folder `dir` (without "." and ".."), sorted; empty when it cannot be read.
inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

/// Seconds since the Unix epoch (system clock), as logged wall times are written.
inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace testing
}  // namespace kindling
