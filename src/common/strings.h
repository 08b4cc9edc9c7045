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

}  // namespace detail
}  // namespace kindling
