// require_same_settings (kindling/dist/same_settings.h): one all_gather of "name=value" lines.
#include "kindling/dist/same_settings.h"

#include <sstream>

#include "kindling/dist/dist.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

void require_same_settings(const std::string& who, const Settings& settings, const Group& group) {
  std::string mine;
  for (const auto& [name, value] : settings) mine += name + "=" + value + "\n";
  const std::vector<std::string> all = all_gather(mine, group);
  if (all.size() < 2) return;
  const std::vector<int> ranks = group.ranks();
  const auto first = lines(all[0]);
  std::string differences;
  for (std::size_t r = 1; r < all.size(); ++r) {
    const auto theirs = lines(all[r]);
    for (std::size_t k = 0; k < first.size() || k < theirs.size(); ++k) {
      const std::string a = k < theirs.size() ? theirs[k] : "(none)", b = k < first.size() ? first[k] : "(none)";
      if (a == b) continue;
      differences += (differences.empty() ? "" : "; ") + std::string("rank ") + std::to_string(ranks.at(r)) + " has " +
                     a + " but rank " + std::to_string(ranks.at(0)) + " has " + b;
    }
  }
  KINDLING_CHECK(differences.empty(), who, ": the ranks were given different settings (", differences,
                 "); every rank must be given the same (the same command line)");
}

}  // namespace dist
}  // namespace kindling
