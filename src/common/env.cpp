#include "common/env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>

#include "kindling/error.h"

extern char** environ;

namespace kindling {
namespace detail {

namespace {
// Held shared by kindling's reads of the environment and alone by its writes (env.h). Never
// destroyed: threads may read the environment while the process exits.
std::shared_mutex& environment_lock() {
  static auto* lock = new std::shared_mutex();
  return *lock;
}
}  // namespace

std::optional<std::string> get_env(const std::string& name) {
  std::shared_lock<std::shared_mutex> reading(environment_lock());
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

void set_env(const std::string& name, const std::string& value) { set_envs({{name, value}}); }

void set_envs(const std::vector<std::pair<std::string, std::string>>& values) {
  std::unique_lock<std::shared_mutex> writing(environment_lock());
  for (const auto& [name, value] : values) ::setenv(name.c_str(), value.c_str(), 1);
}

int parse_int(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  KINDLING_CHECK(!text.empty() && end != nullptr && *end == '\0' && errno == 0 && v >= -2147483647L && v <= 2147483647L,
                 what, "='", text, "' is not an integer; set it to a whole number such as 0 or 1");
  return static_cast<int>(v);
}

std::optional<double> parse_seconds(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double s = text.empty() ? -1 : std::strtod(text.c_str(), &end);
  if (end == nullptr || *end != '\0' || errno != 0 || !(s >= 0 && s <= kMaxSeconds)) return std::nullopt;
  return s;
}

std::optional<int> get_env_int(const std::string& name) {
  auto v = get_env(name);
  if (!v) return std::nullopt;
  return parse_int(*v, "environment variable " + name);
}

std::vector<std::string> snapshot_env() {
  std::shared_lock<std::shared_mutex> reading(environment_lock());
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

void restore_env(const std::vector<std::string>& snapshot) {
  // Remove variables that were added, then put back the saved values.
  std::unique_lock<std::shared_mutex> writing(environment_lock());
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) names.emplace_back(*e, static_cast<std::size_t>(eq - *e));
  }
  for (const auto& n : names) ::unsetenv(n.c_str());
  for (const auto& kv : snapshot) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
}

}  // namespace detail
}  // namespace kindling
