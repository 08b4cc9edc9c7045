#pragma once
// The worker's side of the launchers' error reporting that the runtime uses (the public side,
// record_error(), is in kindling/dist/launch_env.h).

namespace kindling {
namespace dist {
namespace detail {

/// Installs (once) a terminate handler that records an exception nobody caught in the
/// torchelastic error file (TORCHELASTIC_ERROR_FILE) before the previous handler runs.
/// Called by initialize() on every rank; never throws.
void record_uncaught_errors();

}  // namespace detail
}  // namespace dist
}  // namespace kindling
