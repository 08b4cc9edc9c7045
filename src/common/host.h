#pragma once
// This host's name, for messages, run ids and rendezvous records: one reading of gethostname()
// for the runtime, the backends, the rendezvous and kindling-run's supervisor (which links no
// common/ sources, hence inline).
#include <unistd.h>

#include <string>

namespace kindling {
namespace detail {

/// gethostname()'s answer, or `fallback` when it fails or is empty.
inline std::string host_name(const std::string& fallback) {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return fallback;
  return name;
}

}  // namespace detail
}  // namespace kindling
