#pragma once
// What the engines' failures look like to the rest of the runtime: their message without
// LibTorch's backtrace, and the typed timeout a backend raises when its engine gave up
// waiting for peers (so that generic code never reads an engine's text to tell a timeout
// from a failure). Part of the runtime's leaf (src/dist/base/).
#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>

namespace kindling {
namespace dist {
namespace detail {

/// The message of an engine exception, without LibTorch's C++ backtrace. Never throws.
inline std::string engine_message(const std::exception& e) {
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

/// Thrown by a PendingOp's wait (backends/backend.h) when the engine stopped waiting for its
/// peers because its timeout passed, as opposed to failing; what() is the engine's own
/// message. dist/collectives/call.cpp turns it into kindling::TimeoutError with a diagnosis of who is
/// behind. Each backend decides from its engine's own signals what counts as one.
class EngineTimeout : public std::runtime_error {
 public:
  explicit EngineTimeout(const std::string& engine_said) : std::runtime_error(engine_said) {}
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
