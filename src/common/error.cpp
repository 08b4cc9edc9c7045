#include "kindling/error.h"

#include "dist/runtime.h"

namespace kindling {
namespace detail {

std::string rank_prefix() {
  auto& rt = dist::detail::runtime();
  if (rt.world == nullptr) return "";
  return "[rank " + std::to_string(rt.rank) + "/" + std::to_string(rt.world_size) + "] ";
}

}  // namespace detail
}  // namespace kindling
