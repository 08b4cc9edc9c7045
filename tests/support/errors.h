#pragma once
// The message of the exception a callable throws, for tests that check what an error says,
// and how often a warning was told.
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

/// How many times `what` occurs in `text` (e.g. a warning in captured stderr, to check that
/// it is told once).
inline int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); !what.empty() && at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace testing
}  // namespace kindling
