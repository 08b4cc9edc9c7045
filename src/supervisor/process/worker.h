#pragma once
// One worker process as the supervisor holds it: its result so far and its two output
// streams, with how it is started (spawn.cpp) and how its output is relayed (relay.cpp).
// Internal to src/supervisor/; plain POSIX.
#include <sys/types.h>

#include <memory>
#include <string>

#include "supervisor/process/worker_spec.h"

namespace kindling {
namespace supervisor {

/// One of a worker's output pipes.
struct Stream {
  int fd = -1;
  std::string partial;  // the current line so far
  bool is_err = false;
  // The launcher's own stream is a terminal: relay text as it comes, carriage returns
  // included, so that a worker's progress bar redraws its line in place.
  bool terminal = false;
  bool line_open = false;  // terminal relay: the current line's prefix is written
};

struct Worker {
  WorkerResult result;
  Stream out, err;
  bool running = false;
  bool term_sent = false;
  bool kill_sent = false;
  // Failed of its own after another worker's failure, before being told to stop (while the
  // others write their flight records, most often on the peer it lost): named after the first.
  bool failed_after_first = false;
  int order = -1;  // order in which it ended
};

/// Starts `spec` in a process group of its own, its stdout and stderr piped to the returned
/// Worker (told KINDLING_STDOUT_TERMINAL / KINDLING_STDERR_TERMINAL where the supervisor's
/// own stream is a terminal). The child dies with `supervisor`. Throws std::runtime_error
/// (`opt.name` first) when the pipes or the fork fail; an exec failure is exit code 127.
std::unique_ptr<Worker> start_worker(const WorkerSpec& spec, const SupervisorOptions& opt, pid_t supervisor);

/// Sends `sig` to the worker's process group; after anything but SIGKILL or SIGCONT also
/// SIGCONT, so that a stopped worker acts on it.
void signal_group(Worker& w, int sig);

/// Relays what `s` has to read now, line by line (prefixed "[rank<r>]: " when
/// opt.prefix_output) or as it comes to a terminal, keeping stderr's last lines. Returns
/// false at the end of the stream (then closed, an unterminated last line relayed).
bool pump(Worker& w, Stream& s, const SupervisorOptions& opt);

/// Relays the unterminated last line of each stream still open and closes it (for streams
/// a worker's own children keep open after it ended).
void close_streams(Worker& w, const SupervisorOptions& opt);

}  // namespace supervisor
}  // namespace kindling
