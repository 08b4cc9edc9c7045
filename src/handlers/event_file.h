#pragma once
// Internal to kindling's handlers: the TensorBoard event file format (TFRecord framing with
// masked CRC32C, and the few fields of TensorFlow's Event / Summary protobuf messages that
// scalars need), and the POSIX file helpers the TensorBoard and JSON loggers and DiskSaver share.
//
// Why the protobuf wire format is written by hand: Debian ships libprotobuf, but the
// Event and Summary .proto definitions belong to TensorFlow (tensorflow/core/util/event.proto,
// tensorflow/core/framework/summary.proto). Using libprotobuf would mean vendoring those
// .proto files, running protoc in the build and linking one more library, all for five
// fields: Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary)}, Summary{value = 1 (repeated Value)}, Value{tag = 1 (string),
// simple_value = 2 (float)}. Their encoding is a few dozen lines (event_file.cpp), and the
// tests decode the result with the real protobuf runtime (tests/handlers/read_tfevents.py).
//
// Why CRC32C is computed here: zlib (already linked) offers crc32, whose polynomial is
// IEEE 802.3's (0xEDB88320 reflected), not Castagnoli's (0x82F63B78 reflected) that TFRecord
// uses; zlib has no CRC32C.
#include <cstddef>
#include <cstdint>
#include <string>

#include "handlers/json_text.h"

namespace kindling {
namespace handlers {
namespace detail {

/// CRC32C (Castagnoli) of `size` bytes, as in RFC 3720 (crc32c("123456789") == 0xE3069283).
uint32_t crc32c(const char* data, std::size_t size);
/// TFRecord's masked CRC32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const char* data, std::size_t size);
/// One TFRecord: uint64 length (little-endian), masked CRC32C of those 8 bytes, the data,
/// masked CRC32C of the data.
std::string tfrecord(const std::string& data);

/// The encoded Event{wall_time, file_version: "brain.Event:2"} that starts every event file.
std::string file_version_event(double wall_time);
/// The encoded Event{wall_time, step, summary{value{tag, simple_value}}}.
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

/// Seconds since the Unix epoch, with the clock's resolution.
double wall_time_now();

/// The rank the loggers go by: kindling::dist::get_rank() once the distributed model is
/// initialized, else RANK from the environment (a launcher's), else 0. Throws
/// kindling::UsageError when RANK is set but not an integer.
int this_rank();


/// `dir` + "/" + `name` (no doubled slash).
std::string join_path(const std::string& dir, const std::string& name);
/// The part of `path` before its last '/' ("" when it has none).
std::string parent_directory(const std::string& path);
/// Creates `path` and its missing parents (mode 0777 less the umask), as `mkdir -p`; other
/// processes creating them at the same time are fine. Throws kindling::Error naming the
/// directory that could not be made and why; `who` starts the message.
void make_directories(const std::string& path, const std::string& who);

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
  /// Writes all of `bytes` (retrying on EINTR and short writes). Throws kindling::Error naming
  /// the file and the system's reason; `who` starts the message.
  void write(const std::string& bytes, const std::string& who);
  /// fsync(2) then close(2); a no-op when not open. Throws kindling::Error when either fails
  /// (the descriptor is released in any case).
  void close(const std::string& who);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
