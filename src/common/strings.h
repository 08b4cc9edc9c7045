#pragma once
// Small string helpers shared by the library's sources.
#include <string>
#include <vector>

namespace kindling {
namespace detail {

/// "a, b, c": the items separated by `separator`.
inline std::string join(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : separator) + s;
  return out;
}

/// Whether `text` ends with `suffix`.
inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// `text` without the rank tags kindling's messages carry ("[rank 1/2] "). The rendezvous
/// compares refusals this way: every rank of a world meets a refusal such as a batch that the
/// world size does not divide, and which of them is reported first changes from round to round.
inline std::string without_rank_tags(std::string text) {
  for (auto at = text.find("[rank "); at != std::string::npos; at = text.find("[rank ", at)) {
    const auto end = text.find("] ", at);
    const auto digits = text.find_first_not_of("0123456789/", at + 6);
    if (end == std::string::npos || digits != end) {
      at += 6;
      continue;
    }
    text.erase(at, end + 2 - at);
  }
  return text;
}

}  // namespace detail
}  // namespace kindling
