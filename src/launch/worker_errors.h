#pragma once
// The worker's side of the launchers' error reporting that the runtime uses (the public side,
// record_error(), is in kindling/dist/launch_env.h).

namespace kindling {
namespace dist {
namespace detail {

/// Installs (once) a terminate handler that records an exception nobody caught in the
/// torchelastic error file (TORCHELASTIC_ERROR_FILE); a kindling::Error then ends the process
/// with its message and exit code 1, anything else goes on to the previous handler (abort).
/// Called by initialize() and by Parallel's constructor on every rank, before their checks;
/// never throws.
void record_uncaught_errors();

}  // namespace detail
}  // namespace dist
}  // namespace kindling
