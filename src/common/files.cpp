#include "common/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/env.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace detail {

std::string join_path(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string parent_directory(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void make_directories(const std::string& path, const std::string& who) {
  KINDLING_CHECK(!path.empty(), who, ": the directory is an empty string; give a path such as \"runs/exp1\"");
  std::size_t end = 0;
  while (end != std::string::npos) {
    end = path.find('/', end + 1);
    const std::string prefix = path.substr(0, end);
    struct stat st {};
    if (::stat(prefix.c_str(), &st) == 0) {
      KINDLING_CHECK_T(Error, S_ISDIR(st.st_mode), who, ": cannot create the directory ", path, ": ", prefix,
                       " exists and is not a directory; choose another path or remove that file");
      continue;
    }
    if (::mkdir(prefix.c_str(), 0777) == 0) continue;
    const int error = errno;
    if (error == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;  // made meanwhile
    KINDLING_CHECK_T(Error, false, who, ": cannot create the directory ", prefix, " (", std::strerror(error),
                     "); check the path and its permissions");
  }
}

std::string temporary_directory() {
  const auto tmp = get_env("TMPDIR");
  return tmp && !tmp->empty() ? *tmp : std::string("/tmp");
}

std::string make_temporary_directory(const std::string& prefix, const std::string& who) {
  std::string pattern = join_path(temporary_directory(), prefix + "-XXXXXX");
  const bool made = ::mkdtemp(pattern.data()) != nullptr;
  const int error = errno;
  KINDLING_CHECK_T(Error, made, who, ": cannot create a directory ", pattern, " (", std::strerror(error),
                   "); set TMPDIR to a writable directory with free space");
  return pattern;
}

OutputFile::~OutputFile() {
  try {
    close("kindling::handlers");
  } catch (const std::exception& e) {
    kindling::log(LogLevel::kError, e.what());
  }
}

int OutputFile::open(const std::string& path, int flags) {
  KINDLING_INTERNAL_ASSERT(fd_ < 0, "OutputFile::open on an open file");
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_WRONLY | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno;
  fd_ = fd;
  path_ = path;
  return 0;
}

void OutputFile::write(const char* data, std::size_t size, const std::string& who) {
  KINDLING_INTERNAL_ASSERT(fd_ >= 0, "OutputFile::write on a closed file");
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    const int error = errno;
    KINDLING_CHECK_T(Error, n > 0, who, ": cannot write to ", path_, " (", n < 0 ? std::strerror(error) : "no progress",
                     "); check the disk's free space and the file");
    done += static_cast<std::size_t>(n);
  }
}

void OutputFile::close(const std::string& who) {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  // EINVAL / EROFS: a file that cannot be synchronised (a special file); its data was written.
  int sync_error = ::fsync(fd) == 0 ? 0 : errno;
  if (sync_error == EINVAL || sync_error == EROFS) sync_error = 0;
  const int close_error = ::close(fd) == 0 || errno == EINTR ? 0 : errno;
  const int error = sync_error != 0 ? sync_error : close_error;
  KINDLING_CHECK_T(Error, error == 0, who, ": cannot ", sync_error != 0 ? "fsync" : "close", " ", path_, " (",
                   std::strerror(error), "); the last records may not have reached the disk");
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> list_directory(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

std::optional<std::int64_t> modified_ns(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void replace_file(const std::string& path, const std::string& temp_path, const char* data, std::size_t size,
                  const std::string& who) {
  OutputFile file;
  const int error = file.open(temp_path, O_CREAT | O_TRUNC);
  KINDLING_CHECK_T(Error, error == 0, who, ": cannot create ", temp_path, " (", std::strerror(error),
                   "); check the free space and permissions of its folder");
  try {
    file.write(data, size, who);
    file.close(who);
  } catch (...) {
    ::unlink(temp_path.c_str());
    throw;
  }
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(temp_path.c_str());
    KINDLING_CHECK_T(Error, false, who, ": cannot rename ", temp_path, " to ", path, " (",
                     std::strerror(rename_error), ")");
  }
  const std::string folder = parent_directory(path);
  sync_directory(folder.empty() ? "." : folder);
}

}  // namespace detail
}  // namespace kindling
