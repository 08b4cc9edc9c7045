#pragma once
// Small file and clock helpers the tests share.
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
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

/// make_temp_dir's folder, removed with everything in it when the object goes (also when a
/// test fails).
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") : path_(make_temp_dir(tag)) {}
  // Through POSIX calls, not std::filesystem: pip's LibTorch 2.x exports its own copy of
  // libstdc++'s std::filesystem functions, and a test binary's calls bind to it (remove_all
  // crashed there).
  ~TempDir() {
    ::nftw(
        path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// The path of `name` inside it; str(): its own.
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& str() const { return path_; }

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
