#pragma once
// Helpers of the kindling::data tests: files in a temporary directory (plain, gzip) and
// the error messages of throwing calls.
#include <gtest/gtest.h>
#include <kindling/error.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "support/errors.h"
#include "support/files.h"

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace kindling {
namespace testing {

using Bytes = std::vector<uint8_t>;

// Files through POSIX calls, not std::filesystem: pip's LibTorch 2.x exports its own copy of
// libstdc++'s std::filesystem functions, and a test binary's calls bind to it
// (std::filesystem::remove_all crashed there).
inline bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

inline uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + path);
  return static_cast<uint64_t>(st.st_size);
}

inline std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

inline void make_directories(const std::string& dir) {
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') ::mkdir(dir.substr(0, pos).c_str(), 0755);  // EEXIST is fine
  }
}

// TempDir: support/files.h's (one definition in every test executable).

inline void write_file(const std::string& path, const Bytes& bytes) {
  make_directories(parent_of(path));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_gz(const std::string& path, const Bytes& bytes) {
  make_directories(parent_of(path));
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

inline void expect_contains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" is not in: " << text;
  }
}

}  // namespace testing
}  // namespace kindling
