#pragma once
// Environment variables changed for one test and restored after it.
#include <stdlib.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace kindling {
namespace testing {

/// Sets (or, given nullopt, unsets) environment variables for one test and puts the previous
/// values back when destroyed.
class ScopedEnv {
 public:
  void set(const std::string& name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace testing
}  // namespace kindling
