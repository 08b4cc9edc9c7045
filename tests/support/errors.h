#pragma once
// The message of the exception a callable throws, for tests that check what an error says.
#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace kindling {
namespace testing {

/// What `f` throws as E (any std::exception by default); a test failure and "(no error)"
/// when it throws nothing.
template <typename E = std::exception, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception was thrown";
  return "(no error)";
}

}  // namespace testing
}  // namespace kindling
