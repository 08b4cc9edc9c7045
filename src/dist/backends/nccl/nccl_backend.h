#pragma once
// The nccl backend: ProcessGroupNCCL over c10d, one GPU per rank. The traits
// (nccl_traits.cpp) are in every build; the rest needs KINDLING_WITH_NCCL.
#include <memory>

#include "dist/backends/backend.h"
#include "dist/backends/backend_traits.h"

namespace kindling {
namespace dist {
namespace detail {

/// What generic code knows about nccl (backend_traits.h), made once by the registry. Never throws.
BackendTraits nccl_traits();

/// Creates the nccl backend (c10d ProcessGroupNCCL): picks this rank's GPU, cuda:<local
/// rank> (throws kindling::UsageError when that GPU does not exist, as NCCL cannot share
/// one GPU between ranks), makes it the current device, then the rendezvous and world group
/// as for gloo. Collective timeouts and NCCL errors are reported by c10d's watchdog as
/// errors on the waiting rank (TORCH_NCCL_ASYNC_ERROR_HANDLING, set to 1 unless the user
/// set it). Called by initialize() on every rank.
std::unique_ptr<Backend> make_nccl_backend(const WorldConfig& config);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
