#pragma once
// Watchdog: a last deadline on a blocking step that an engine promises to end by itself.
//
// Some engine calls cannot be interrupted and do not always keep their own timeout. Seen with
// LibTorch 2.15 when a host's link is cut during the rendezvous: c10d's TCPStore client,
// after its wait timed out, reads the answer to its stop-waiting request with no deadline,
// and gloo's pair keeps waiting for a connection to the cut host. The rank would hang for
// ever instead of failing. A Watchdog bounds such a step from a thread of its own: if the
// step is still running `limit` after it began, the watchdog logs a kindling::TimeoutError
// message naming the step (and what `diagnose` can tell), records it as this worker's
// failure (TORCHELASTIC_ERROR_FILE, so the launcher's summary shows it) and ends the process
// with exit code 1 (std::_Exit: the blocked thread could not be joined by destructors).
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
  /// Arms the watchdog for the first step. `what` names the blocked operation for the
  /// message ("kindling::dist::initialize (gloo rendezvous)"); `diagnose` (may be empty)
  /// adds to it, e.g. which ranks did not arrive. `diagnose` runs on a thread of its own and
  /// is given up on after 2 s, as it may block on the same engine; it must own what it uses.
  /// Throws std::system_error if the thread cannot start.
  Watchdog(std::string what, std::string first_step, std::chrono::milliseconds limit,
           std::function<std::string()> diagnose = {});
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
