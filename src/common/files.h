#pragma once
// The library's and the launchers' one set of file helpers, on POSIX calls: paths, `mkdir -p`,
// temporary directories, directory listings, modification times, a file written record by
// record and a file replaced atomically. Not std::filesystem: pip's LibTorch 2.x exports its own copy of libstdc++'s
// std::filesystem functions, which programs linked against it bind to (on the GPU machine
// std::filesystem::remove_all jumped to address 0). Not iostreams for writing: one write(2)
// per record keeps records whole and unbuffered.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kindling {
namespace detail {

/// `dir` + "/" + `name` (no doubled slash; `name` alone when `dir` is empty).
std::string join_path(const std::string& dir, const std::string& name);
/// The part of `path` before its last '/' ("" when it has none, "/" for "/x").
std::string parent_directory(const std::string& path);
/// Creates `path` and its missing parents (mode 0777 less the umask), as `mkdir -p`; other
/// processes creating them at the same time are fine. Throws kindling::Error naming the
/// directory that could not be made and why; `who` starts the message.
void make_directories(const std::string& path, const std::string& who);

/// The directory for temporary files: $TMPDIR, else /tmp. Any thread; never throws.
std::string temporary_directory();
/// Creates a new private directory (mode 0700) named `prefix`-XXXXXX in temporary_directory()
/// and returns its path. Throws kindling::Error naming it and the system's reason; `who` starts
/// the message.
std::string make_temporary_directory(const std::string& prefix, const std::string& who);

/// Whether `path` is a directory / a regular file (following links). Never throw.
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
/// The names in directory `path` but "." and "..", in the order the system gives them;
/// empty when it cannot be read. Never throws.
std::vector<std::string> list_directory(const std::string& path);
/// When `path` was last modified, in nanoseconds since the epoch; nullopt when it cannot be
/// read. Never throws.
std::optional<std::int64_t> modified_ns(const std::string& path);
/// fsync(2) of a directory, so that a rename or unlink in it reaches the disk; best effort
/// (a file system that cannot sync a directory is left as it is). Never throws.
void sync_directory(const std::string& path);

/// A file written with one write(2) per record, so that nothing waits in a buffer of this
/// process (what is written is in the kernel when write() returns, "flushed"), and
/// fsync(2)ed at close. Not thread-safe: its owners lock.
class OutputFile {
 public:
  OutputFile() = default;
  /// Closes without throwing (a failure is written to kindling's log).
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// Opens `path` with open(2) `flags` (O_WRONLY | O_CLOEXEC are added) and mode 0644.
  /// Returns 0, or the errno of the failure (the file stays closed).
  int open(const std::string& path, int flags);
  /// Writes all of the bytes (retrying on EINTR and short writes). Throws kindling::Error
  /// naming the file and the system's reason; `who` starts the message.
  void write(const char* data, std::size_t size, const std::string& who);
  void write(const std::string& bytes, const std::string& who) { write(bytes.data(), bytes.size(), who); }
  /// fsync(2) then close(2); a no-op when not open. Throws kindling::Error when either fails
  /// (the descriptor is released in any case).
  void close(const std::string& who);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

/// The library's one writer of whole files (checkpoints, the run folder's marker, profiler
/// results, torchelastic error files; docs/design.md "Files"); any rank that writes one.
/// Replaces `path` by `size` bytes all at once: written to `temp_path` (same directory),
/// fsync'ed, renamed over `path`, the directory fsync'ed; a reader sees the old file or the
/// whole new one, never a part. On failure `temp_path` is removed and kindling::Error names
/// the step and the system's reason; `who` starts the message.
void replace_file(const std::string& path, const std::string& temp_path, const char* data, std::size_t size,
                  const std::string& who);

}  // namespace detail
}  // namespace kindling
