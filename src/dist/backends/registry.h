#pragma once
// Which backends exist (the one list, registry.cpp) and their traits (backend_traits.h).
// Adding a backend means a folder under src/dist/backends/ (the file set is in backend.h) and
// one line in registry.cpp.
#include <string>
#include <vector>

#include "dist/backends/backend_traits.h"

namespace kindling {
namespace dist {
namespace detail {

/// The traits of backend `name`, or null when kindling knows no such backend. Never throws.
const BackendTraits* find_backend(const std::string& name);

/// The traits of backend `name` for `caller` ("kindling::dist::initialize"), checked for this
/// machine and build. Throws kindling::UsageError for an unknown name, a backend this build
/// lacks, or a CUDA backend without CUDA (ignite's message), each saying what to do.
const BackendTraits& usable_backend(const std::string& name, const std::string& caller);

/// The names of the backends this build has, "serial" first. Never throws.
std::vector<std::string> built_backends();

}  // namespace detail
}  // namespace dist
}  // namespace kindling
