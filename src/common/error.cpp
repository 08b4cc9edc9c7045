#include "kindling/error.h"

#include "common/identity.h"

namespace kindling {
namespace detail {

std::string rank_prefix() {
  const auto who = identity();
  if (!who) return "";
  return "[rank " + std::to_string(who->first) + "/" + std::to_string(who->second) + "] ";
}

}  // namespace detail
}  // namespace kindling
