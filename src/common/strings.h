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

}  // namespace detail
}  // namespace kindling
