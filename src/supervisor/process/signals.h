#pragma once
// The supervisor's signals: SIGCHLD, SIGINT, SIGTERM and SIGHUP are turned into bytes on a
// pipe (self-pipe) that the supervision loop polls with the workers' output. Internal to
// src/supervisor/; plain POSIX.
#include <signal.h>

#include <string>
#include <vector>

namespace kindling {
namespace supervisor {

/// The signals the supervisor handles while it runs; a worker restores their default action.
constexpr int kSupervisedSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
constexpr int kSupervisedSignalCount = 4;

/// Installs the handlers for the life of one supervise() call and restores the old ones.
/// Throws std::runtime_error when the pipe cannot be made. One at a time per process.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  /// The pipe's reading end (non-blocking), for poll().
  int fd() const;
  /// The stop requests (SIGINT, SIGTERM, SIGHUP) that arrived since the last call, oldest
  /// first; SIGCHLD bytes are dropped. Never blocks.
  std::vector<int> take_requests();

 private:
  struct sigaction old_[kSupervisedSignalCount];
};

/// " from pid P (its command name)" of the process that sent the last stop request, for the
/// received-signal message; empty when unknown (the kernel, or no request yet).
std::string signal_sender();

}  // namespace supervisor
}  // namespace kindling
