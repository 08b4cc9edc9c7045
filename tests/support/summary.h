#pragma once
// Reading a launcher's failure summary (kindling-run's stderr, Parallel's LaunchError).
#include <sstream>
#include <string>

namespace kindling {
namespace testing {

/// Whether `summary` accounts for `rank` as a worker that ended after the first failure: in
/// its "stopped ranks 0, 2 (...)" line, or named on a line of its own as having failed "after
/// rank R's failure" (a survivor may fail on the lost peer before the launcher stops it).
inline bool follows_first_failure(const std::string& summary, int rank) {
  const std::string r = std::to_string(rank);
  std::istringstream lines(summary);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  rank " + r + " (", 0) == 0 && line.find(" after rank ") != std::string::npos) return true;
    const std::string stopped = "  stopped rank";
    if (line.rfind(stopped, 0) != 0) continue;
    std::string list = line.substr(line.find(' ', stopped.size()) + 1);
    list = list.substr(0, list.find(" ("));
    std::istringstream ranks(list);
    for (std::string one; std::getline(ranks, one, ',');) {
      if (one.find_first_not_of(' ') != std::string::npos && one.substr(one.find_first_not_of(' ')) == r) return true;
    }
  }
  return false;
}

}  // namespace testing
}  // namespace kindling
