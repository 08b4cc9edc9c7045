#pragma once
// torchelastic's error files: a failing worker records its error in the JSON file named by
// TORCHELASTIC_ERROR_FILE, and the launcher (kindling-run, Parallel, torchrun) reports the
// first failure of the job from these files instead of guessing from exit codes. The
// layout is Python's ErrorHandler's, so torchrun reads kindling's files and kindling-run
// reads a Python worker's:
//   {"message": {"message": "<type>: <text>", "extraInfo": {"py_callstack": "...",
//                                                           "timestamp": "<unix seconds>"}}}
// Plain C++ and nlohmann-json, no LibTorch: in kindling_common, so that the library (its
// workers write them) and the launchers (kindling-run, Parallel's spawn mode read them) share
// one codec.
#include <optional>
#include <string>

namespace kindling {
namespace detail {

struct ErrorRecord {
  std::string message;
  long long timestamp = 0;  // seconds since the epoch
  long long time_ns = 0;    // nanoseconds since the epoch (kindling's files; else timestamp's)
};

/// Writes `type: message` to `path` through common/files.h's replace_file (a temporary file
/// beside it, fsync'ed, renamed over it, the folder fsync'ed: a reader sees all or nothing).
/// Returns false when the file cannot be written, with the reason (path, system's message)
/// in kindling's log as a warning; never throws: it runs on failure paths (record_error,
/// the terminate handler), on the failing rank.
bool write_error_file(const std::string& path, const std::string& type, const std::string& message);

/// Reads a file written by write_error_file or by Python's ErrorHandler; nullopt when it
/// is missing or unreadable.
std::optional<ErrorRecord> read_error_file(const std::string& path);

}  // namespace detail
}  // namespace kindling
