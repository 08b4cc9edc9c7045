#pragma once
// One check of InitOptions for every entry point that accepts them (initialize, Parallel),
// so that each refuses the same values with the same words.
#include <string>

#include "dist/backends/backend_traits.h"
#include "kindling/dist/dist.h"

namespace kindling {
namespace dist {
namespace detail {

/// Checks `options` for the backend of `traits`: a positive timeout, a stall_timeout that is
/// not negative, an init_method of env://, tcp:// or file://, and env:// for a backend whose
/// own launcher connects the ranks (mpi). `caller` ("kindling::dist::initialize") begins each
/// message. Throws kindling::UsageError saying what to change. Any rank, before anything starts.
void check_init_options(const BackendTraits& traits, const InitOptions& options, const std::string& caller);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
