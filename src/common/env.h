#pragma once
// Environment helpers: typed reads with actionable errors, snapshot and restore.
#include <optional>
#include <string>
#include <vector>

namespace kindling {
namespace detail {

std::optional<std::string> get_env(const std::string& name);
void set_env(const std::string& name, const std::string& value);
/// Reads an integer variable; throws kindling::UsageError naming the variable if it is not one.
std::optional<int> get_env_int(const std::string& name);
/// Parses an integer; `what` names the source in the error message.
int parse_int(const std::string& text, const std::string& what);

/// A copy of the whole environment.
std::vector<std::string> snapshot_env();
/// Makes the environment equal to `snapshot` again.
void restore_env(const std::vector<std::string>& snapshot);

}  // namespace detail
}  // namespace kindling
