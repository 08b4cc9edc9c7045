// DiskSaver: durable, atomic checkpoint files (temporary file, fsync, rename, fsync of the
// folder). POSIX calls rather than std::filesystem: pip's libtorch.so exports its own copy of
// std::filesystem, which programs linked against it bind to (see src/data/datasets.cpp).
#include "kindling/handlers/disk_saver.h"

#include "handlers/event_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {
namespace {

constexpr const char* kTempPrefix = ".kindling-partial-";

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_dir(const std::string& path) {
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

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void write_all(int fd, const std::vector<char>& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    KINDLING_CHECK_T(Error, n > 0, "kindling::handlers::DiskSaver: writing '", path,
                     "' failed: ", std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

DiskSaver::DiskSaver(std::string dirname, DiskSaverOptions options) : dirname_(std::move(dirname)), options_(options) {
  KINDLING_CHECK(!dirname_.empty(), "kindling::handlers::DiskSaver: the folder name is empty");
  if (!saves_here()) return;
  if (!is_dir(dirname_)) {
    KINDLING_CHECK(options_.create_dir(), "kindling::handlers::DiskSaver: the folder '", dirname_,
                   "' does not exist (create_dir is false); create it or set create_dir(true)");
    detail::make_directories(dirname_, "kindling::handlers::DiskSaver");
  }
  std::vector<std::string> checkpoints;
  for (const auto& name : list_dir(dirname_)) {
    if (name.rfind(kTempPrefix, 0) == 0) {
      ::unlink((dirname_ + "/" + name).c_str());
      log(LogLevel::kInfo, "kindling::handlers::DiskSaver: removed '" + name + "' in '" + dirname_ +
                               "', left by a save that did not finish");
    } else if (ends_with(name, ".pt")) {
      checkpoints.push_back(name);
    }
  }
  if (options_.require_empty() && !checkpoints.empty()) {
    std::string list;
    for (const auto& c : checkpoints) list += (list.empty() ? "" : ", ") + c;
    KINDLING_CHECK(false, "kindling::handlers::DiskSaver: files [", list,
                   "] with extension '.pt' are already "
                   "present in the folder '",
                   dirname_,
                   "'; they would be mixed with the new checkpoints: use "
                   "another folder, or require_empty(false) to keep them");
  }
}

bool DiskSaver::saves_here() const { return dist::get_rank() == options_.save_on_rank(); }

void DiskSaver::save(const std::vector<char>& bytes, const std::string& filename) {
  if (!saves_here()) return;
  const std::string final_path = dirname_ + "/" + filename;
  const std::string path =
      options_.atomic() ? dirname_ + "/" + kTempPrefix + std::to_string(::getpid()) + "-" + filename : final_path;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  KINDLING_CHECK_T(Error, fd >= 0, "kindling::handlers::DiskSaver: cannot create '", path, "': ", std::strerror(errno));
  try {
    write_all(fd, bytes, path);
    KINDLING_CHECK_T(Error, !options_.atomic() || ::fsync(fd) == 0, "kindling::handlers::DiskSaver: fsync of '", path,
                     "' failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  ::close(fd);
  if (!options_.atomic()) return;
  if (::rename(path.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    KINDLING_CHECK_T(Error, false, "kindling::handlers::DiskSaver: renaming '", path, "' to '", final_path,
                     "' failed: ", std::strerror(err));
  }
  fsync_path(dirname_, O_RDONLY | O_DIRECTORY);
}

void DiskSaver::remove(const std::string& filename) {
  if (!saves_here()) return;
  const std::string path = dirname_ + "/" + filename;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    log(LogLevel::kWarning,
        "kindling::handlers::DiskSaver: could not remove '" + path + "': " + std::string(std::strerror(errno)));
  }
  if (options_.atomic()) fsync_path(dirname_, O_RDONLY | O_DIRECTORY);
}

}  // namespace handlers
}  // namespace kindling
