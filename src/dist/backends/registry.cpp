// The one list of kindling's backends (registry.h). Each backend folder defines its traits
// in <name>_traits.cpp, compiled in every build, so that a backend this build lacks can
// still say how to get it.
#include "dist/backends/registry.h"

#include <ATen/Context.h>

#include "common/strings.h"
#include "dist/backends/gloo/gloo_backend.h"
#include "dist/backends/mpi/mpi_backend.h"
#include "dist/backends/nccl/nccl_backend.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

// "serial" is no engine: the runtime stays without a Backend (docs/design.md).
BackendTraits serial_backend_traits() {
  BackendTraits t;
  t.name = "serial";
  t.joins_ranks = false;
  return t;
}

// In the order available_backends() lists them; made once and never destroyed (the runtime
// keeps pointers to them until the process ends).
const std::vector<const BackendTraits*>& every_backend() {
  static const auto* all = new std::vector<const BackendTraits*>{
      new BackendTraits(serial_backend_traits()), new BackendTraits(nccl_traits()), new BackendTraits(gloo_traits()),
      new BackendTraits(mpi_traits())};
  return *all;
}

bool is_built(const BackendTraits& t) { return !t.joins_ranks || t.make != nullptr; }

}  // namespace

const BackendTraits* find_backend(const std::string& name) {
  for (const BackendTraits* t : every_backend())
    if (t->name == name) return t;
  return nullptr;
}

std::vector<std::string> built_backends() {
  std::vector<std::string> out;
  for (const BackendTraits* t : every_backend())
    if (is_built(*t)) out.push_back(t->name);
  return out;
}

const BackendTraits& usable_backend(const std::string& name, const std::string& caller) {
  const BackendTraits* t = find_backend(name);
  // ignite's check, first: on a machine without CUDA the build's support is moot.
  KINDLING_CHECK(t == nullptr || !t->needs_cuda || at::hasCUDA(), caller, "(\"", name, "\"): ", name,
                 " backend is required but no cuda capable devices were found (this LibTorch has no CUDA, or no GPU is "
                 "visible); ",
                 t->without_cuda);
  KINDLING_CHECK(t != nullptr && is_built(*t), caller, ": unknown or unavailable backend '", name, "'",
                 t != nullptr ? " (" + t->build_hint + ")" : std::string(),
                 ". Available backends: ", ::kindling::detail::join(built_backends()));
  return *t;
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
