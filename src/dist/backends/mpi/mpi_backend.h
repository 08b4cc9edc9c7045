#pragma once
#include <memory>
#include <string>

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

/// Creates the mpi backend on Open MPI: initializes MPI (MPI_THREAD_MULTIPLE) unless the
/// program already did, checks that MPI's ranks match `config` (which the launcher
/// detection filled; `launcher` names it in errors) and reads the node layout from MPI.
std::unique_ptr<Backend> make_mpi_backend(const WorldConfig& config, const std::string& launcher);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
