// The warning for a program that runs as one of several ranks of a launcher but asks for
// its rank or calls a collective before kindling::dist::initialize: without it every rank
// silently acts as rank 0 of a world of 1 (its own copy of the data, no reduction), as
// idist does.
#include <atomic>
#include <exception>
#include <string>

#include "dist/runtime.h"
#include "kindling/dist/launch_env.h"
#include "kindling/log.h"

namespace kindling {
namespace dist {
namespace detail {

namespace {
std::atomic<bool> g_installed{false};  // a distributed model was installed in this process
std::atomic<bool> g_checked{false};    // the environment was looked at (once per process)
}  // namespace

void note_model_installed() { g_installed.store(true, std::memory_order_relaxed); }

void warn_if_never_initialized(const char* what) {
  if (g_installed.load(std::memory_order_relaxed) || g_checked.exchange(true)) return;
  LaunchEnvironment launch;
  try {
    launch = detect_launch_environment();
  } catch (const std::exception&) {
    return;  // an inconsistent environment: initialize() names it when the program calls it
  }
  if (!launch.detected() || launch.world_size <= 1) return;
  kindling::log(LogLevel::kWarning,
                std::string("kindling::dist::") + what + " was called before kindling::dist::initialize, while " +
                    launch.launcher + " runs this program as rank " + std::to_string(launch.rank) + " of " +
                    std::to_string(launch.world_size) +
                    ": until initialize every rank answers as rank 0 of a world of 1 and collectives return their "
                    "input unchanged (each rank trains on its own, on the same data). Call "
                    "kindling::dist::initialize(backend) first, or run your function through "
                    "kindling::dist::Parallel. (This warning is given once.)");
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
