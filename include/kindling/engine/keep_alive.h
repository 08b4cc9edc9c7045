#pragma once
/// \file
/// The one ownership rule for what attaches to an Engine (metrics, checkpoints, progress
/// bars, timers, parameter schedulers): the engine keeps it alive. attach() takes a
/// std::shared_ptr to the object from the object itself (std::enable_shared_from_this), so
/// an object made with std::make_shared may be a temporary, or a variable of a helper
/// function that has returned, as in ignite code:
/// \code
///   std::make_shared<kh::Checkpoint>(to_save, "checkpoints")->attach(trainer, Events::EPOCH_COMPLETED);
/// \endcode
/// An object that no std::shared_ptr owns (a local variable, a member) is refused: the
/// engine could not keep it alive, and its handlers would read freed memory.

#include <memory>
#include <string>

#include "kindling/error.h"

namespace kindling {
namespace engine {

/// The std::shared_ptr that owns `object`, for the handlers that attach() adds. Throws
/// kindling::UsageError naming `who` (e.g. "kindling::handlers::Checkpoint") when no
/// std::shared_ptr owns it. T derives from std::enable_shared_from_this (of itself or of a
/// base). Local.
template <typename T>
std::shared_ptr<T> keep_alive(T& object, const std::string& who) {
  auto self = object.weak_from_this().lock();
  if (!self) {
    throw UsageError(who + ".attach: the object must be owned by a std::shared_ptr (make it with std::make_shared) "
                           "so that the engine can keep it alive after your variable is gone");
  }
  return std::static_pointer_cast<T>(self);
}

}  // namespace engine
}  // namespace kindling
