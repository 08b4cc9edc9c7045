#pragma once
// The mpi backend on Open MPI, with the shared-memory all_reduce between ranks of one node.
// The traits (mpi_traits.cpp) are in every build; the rest needs KINDLING_WITH_MPI.
#include <memory>

#include "dist/backends/backend.h"
#include "dist/backends/backend_traits.h"

namespace kindling {
namespace dist {
namespace detail {

/// What generic code knows about mpi (backend_traits.h), made once by the registry. Never throws.
BackendTraits mpi_traits();

/// Creates the mpi backend on Open MPI: initializes MPI (MPI_THREAD_MULTIPLE) unless the
/// program already did, checks that MPI's ranks match `config` (which the launcher
/// detection filled; `config.launcher` names it in errors) and reads the node layout from
/// MPI. Called by initialize() on every rank; throws kindling::Error.
std::unique_ptr<Backend> make_mpi_backend(const WorldConfig& config);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
