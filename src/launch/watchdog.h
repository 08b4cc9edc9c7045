#pragma once
// Watchdog: a last deadline on a blocking step that cannot be interrupted.
//
// Some engine calls cannot be interrupted and do not always end by themselves. Seen with
// LibTorch 2.15 when a host's link is cut during the rendezvous: c10d's TCPStore client,
// after its wait timed out, reads the answer to its stop-waiting request with no deadline,
// and gloo's pair keeps waiting for a connection to the cut host. MPI_Init waits without any
// timeout for every rank of the job. The rank would hang for ever instead of failing. A
// Watchdog bounds such a step from a thread of its own: if the step is still running `limit`
// after it began, the watchdog logs a kindling::TimeoutError message naming the step, why it
// blocks and what `diagnose` can tell, records it as this worker's failure
// (TORCHELASTIC_ERROR_FILE, so the launcher's summary shows it) and ends the process with
// `exit_code` (std::_Exit: the blocked thread could not be joined by destructors), so that
// the launcher stops the job.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace kindling {
namespace detail {

/// The limit for a step whose engine promises to end within `timeout`: the timeout plus a
/// grace of 3 s and a tenth of it, for an engine that ends a little late but by itself.
std::chrono::milliseconds watchdog_limit(std::chrono::milliseconds timeout);

class Watchdog {
 public:
  /// What a watchdog says and does when a step outlives its limit.
  struct Verdict {
    /// The blocked operation ("kindling::dist::initialize (gloo rendezvous)").
    std::string what;
    /// Why such a step can block past the limit and what to check; one or more sentences.
    std::string cause;
    /// The process's exit code.
    int exit_code = 1;
    /// More for the message (who did not arrive, say); may be empty. It runs on a thread of
    /// its own and is given up on after 2 s, as it may block on the same engine; it must own
    /// what it uses.
    std::function<std::string()> diagnose;
    /// Asked every half second while a step runs, on a thread of its own (one call at a
    /// time; a call that blocks is left behind and does not delay the limit): a non-empty
    /// answer (another rank's failure, say) ends the process with that cause and
    /// `exit_code`, as the limit would. It must own what it uses; may be empty.
    std::function<std::string()> poll;
    /// Said once (a warning) when the first step still runs `note_after` after it began:
    /// what it waits for and why that may never come; may be empty. It runs on the
    /// watchdog's thread and must own what it uses.
    std::function<std::string()> note;
    /// Asked every half second, before `poll` and the limit: true ends the watch and leaves
    /// the process alone (whoever waited for the step gave it up and left it behind on its
    /// thread). It must own what it uses and answer at once; may be empty.
    std::function<bool()> stand_down;
    std::chrono::milliseconds note_after{5000};
  };

  /// Arms the watchdog for `first_step` ("connecting to the other ranks"). Throws
  /// std::system_error if its thread cannot start.
  Watchdog(Verdict verdict, std::string first_step, std::chrono::milliseconds limit);
  /// Disarms: a step that returned (or threw) ends the watch. Never throws.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Begins the next step: its limit counts from now.
  void step(std::string description);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace detail
}  // namespace kindling
