#pragma once
// Environment helpers: typed reads with actionable errors, snapshot and restore.
//
// The environment is shared by every thread, and POSIX leaves a getenv that runs while another
// thread's setenv changes it undefined. kindling's own reads and writes therefore all go through
// these helpers, which hold one lock: reads share it, writes take it alone, so no thread of
// kindling's reads the environment while kindling writes it (initialize() publishing RANK and
// the rest, finalize() restoring them). Code outside kindling that calls getenv is not covered:
// kindling writes only in initialize(), finalize() and Parallel's start, as idist does.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kindling {
namespace detail {

/// A variable's value, nullopt when unset. Any thread; never throws.
std::optional<std::string> get_env(const std::string& name);
/// Sets one variable. Any thread; never throws.
void set_env(const std::string& name, const std::string& value);
/// Sets several variables in one write: a reader sees all of them changed or none. Any thread.
void set_envs(const std::vector<std::pair<std::string, std::string>>& values);
/// Reads an integer variable; throws kindling::UsageError naming the variable if it is not one.
std::optional<int> get_env_int(const std::string& name);
/// Parses an integer; `what` names the source in the error message.
int parse_int(const std::string& text, const std::string& what);
/// The longest duration a setting takes, in seconds: about 115 days, so that it fits in
/// milliseconds of any clock.
constexpr double kMaxSeconds = 1e7;
/// Parses a number of seconds from 0 to kMaxSeconds ("2", "0.5"); nullopt for anything else
/// (NaN, infinities, trailing text). Never throws: the caller words the refusal.
std::optional<double> parse_seconds(const std::string& text);

/// A copy of the whole environment ("NAME=value" entries), read in one piece. Any thread.
std::vector<std::string> snapshot_env();
/// Makes the environment equal to `snapshot` again, in one write. Any thread.
void restore_env(const std::vector<std::string>& snapshot);

}  // namespace detail
}  // namespace kindling
