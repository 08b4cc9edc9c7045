#pragma once
/// \file
/// The one idiom of kindling's options classes (InitOptions, DdpOptions, CheckpointOptions,
/// ...), in the spirit of LibTorch's TORCH_ARG: each option is one line
///
/// \code
///   /// Checkpoints kept (default 2).
///   KINDLING_ARG(int, n_saved) = 2;
/// \endcode
///
/// which declares the chainable setter `n_saved(int)` (returns the options object, so that
/// `CommonTrainingOptions().n_saved(3).stop_on_nan(false)` reads as a sentence), the getter
/// `n_saved()` and the private member `n_saved_` with its default. An option that may be
/// unset is a `std::optional<T>` (its setter takes a plain T too). A type whose spelling holds
/// a comma gets a `using` alias first. The options are checked where they are used, by one
/// function per options type that every entry point taking them calls (for InitOptions:
/// initialize and Parallel).
#include <utility>

/// Declares option `name` of type `T` in an options class: `Self& name(T)` sets it and
/// returns the object, `T const& name() const` reads it; the default follows the macro.
/// Leaves the class in `private:` access; nothing else belongs after it.
#define KINDLING_ARG(T, name)                              \
 public:                                                   \
  auto name(T value)->decltype(*this) {                    \
    this->name##_ = std::move(value);                      \
    return *this;                                          \
  }                                                        \
  T const& name() const noexcept { return this->name##_; } \
                                                           \
 private:                                                  \
  T name##_
