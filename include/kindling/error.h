#pragma once
/// \file
/// kindling's exception types and the KINDLING_CHECK macro.
///
/// Every error kindling raises is a kindling::Error (a std::runtime_error). Its message says
/// who and where ("[rank 2/4] kindling::dist::broadcast"), what went wrong, the value seen
/// against the value expected, and what to do about it.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "kindling/export.h"

namespace kindling {

/// Base class of every exception kindling throws.
class KINDLING_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// The caller used the API wrongly (bad argument, wrong order of calls, bad environment).
class KINDLING_API UsageError : public Error {
 public:
  using Error::Error;
};

/// A rendezvous or a collective did not complete within its timeout.
class KINDLING_API TimeoutError : public Error {
 public:
  using Error::Error;
};

/// A collective failed in the communication engine (for example a peer process died).
class KINDLING_API CommunicationError : public Error {
 public:
  using Error::Error;
};

/// A process that kindling started (Parallel's spawn mode) failed; the message names each
/// failed rank, its exit status and its last stderr lines.
class KINDLING_API LaunchError : public Error {
 public:
  explicit LaunchError(const std::string& what, int exit_code = 1) : Error(what), exit_code_(exit_code) {}
  /// The status kindling-run would exit with for this failure, for a program to return from
  /// main: the first failed worker's exit code, 128 + the signal's number for a worker killed
  /// by a signal or for a signal (Ctrl-C, SIGTERM) the launching process received; never 0.
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

/// A kindling invariant does not hold: this is a bug in kindling.
class KINDLING_API InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Parts>
std::string join_message(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

/// Prefix "[rank r/w] " describing the calling process, or "" before initialization
/// in a single process. Defined in src/common/error.cpp.
KINDLING_API std::string rank_prefix();

}  // namespace detail
}  // namespace kindling

/// Throws `ExceptionType` with the parts joined (like TORCH_CHECK) unless `cond` holds.
/// The message is prefixed with the calling rank.
#define KINDLING_CHECK_T(ExceptionType, cond, ...)                                                            \
  do {                                                                                                        \
    if (!(cond)) {                                                                                            \
      throw ExceptionType(::kindling::detail::rank_prefix() + ::kindling::detail::join_message(__VA_ARGS__)); \
    }                                                                                                         \
  } while (0)

/// Usage check: throws kindling::UsageError with the joined message unless `cond` holds.
#define KINDLING_CHECK(cond, ...) KINDLING_CHECK_T(::kindling::UsageError, cond, __VA_ARGS__)

/// Internal invariant: throws kindling::InternalError unless `cond` holds.
#define KINDLING_INTERNAL_ASSERT(cond, ...)                                                                     \
  KINDLING_CHECK_T(::kindling::InternalError, cond, "internal error at ", __FILE__, ":", __LINE__, ": ", #cond, \
                   " failed. ", ##__VA_ARGS__, " This is a kindling bug, please report it.")
