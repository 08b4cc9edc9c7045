// The process-global state of kindling::dist (runtime_state.h).
#include "dist/runtime_state.h"

// Complete types for the members' destructors (the header declares them only).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace kindling {
namespace dist {
namespace detail {

Runtime& runtime() {
  static Runtime* rt = new Runtime();  // never destroyed: safe to use from atexit paths
  return *rt;
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
