#pragma once
// Small file and clock helpers the tests share.
#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace kindling {
namespace testing {

/// A new empty folder /tmp/kindling-<tag>-XXXXXX (mkdtemp); the caller removes it.
inline std::string make_temp_dir(const std::string& tag) {
  std::string pattern = "/tmp/kindling-" + tag + "-XXXXXX";
  return mkdtemp(pattern.data());
}

/// make_temp_dir's folder, removed with everything in it when the object goes (also when a
/// test fails).
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") : path_(make_temp_dir(tag)) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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
