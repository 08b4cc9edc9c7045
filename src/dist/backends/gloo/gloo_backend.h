#pragma once
// The gloo backend: ProcessGroupGloo over c10d, CPU tensors and CUDA tensors through host
// memory. The traits (gloo_traits.cpp) are in every build; the rest needs KINDLING_WITH_GLOO.
#include <chrono>
#include <memory>

#include "dist/backends/backend.h"
#include "dist/backends/backend_traits.h"

namespace kindling {
namespace dist {
namespace detail {

/// What generic code knows about gloo (backend_traits.h), made once by the registry. Never throws.
BackendTraits gloo_traits();

/// Creates the gloo backend: rendezvous, world ProcessGroupGloo and Python-compatible
/// start-up (store layout, store-based barrier, sequence number). Called by initialize() on
/// every rank; throws kindling::Error or c10d's exceptions.
std::unique_ptr<Backend> make_gloo_backend(const WorldConfig& config);

/// The process groups of new_group calls on a user's gloo group (kindling/dist/c10d.h):
/// gloo on the group's store with `timeout`, on the host name's address as Python's default.
ProcessGroupFactory adopted_gloo_groups(std::chrono::milliseconds timeout);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
