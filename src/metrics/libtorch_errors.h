// Internal to kindling's metrics: a LibTorch error raised by a computation on a metric's
// inputs (mismatched shapes, in the metric's own arithmetic or in a function the user gave
// it) rethrown naming the metric, without LibTorch's stack trace.
#pragma once

#include <c10/util/Exception.h>

#include <string>
#include <utility>

#include "kindling/error.h"

namespace kindling {
namespace metrics {

/// Returns f(). A c10::Error from it (not out-of-memory, which is rethrown as it is) becomes a
/// kindling::UsageError: "kindling::metrics::<metric>: <what()>, LibTorch: <reason>; <advice>".
/// `what` is called only then (it builds the message from the inputs, e.g. their shapes).
template <typename F, typename What>
auto naming_libtorch_errors(const std::string& metric, F&& f, What&& what, const char* advice) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error& e) {
    throw UsageError(detail::rank_prefix() + "kindling::metrics::" + metric + ": " + what() +
                     " (LibTorch: " + e.what_without_backtrace() + "); " + advice);
  }
}

}  // namespace metrics
}  // namespace kindling
