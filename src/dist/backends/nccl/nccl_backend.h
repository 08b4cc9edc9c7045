#pragma once
#include <memory>

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

/// Creates the nccl backend (c10d ProcessGroupNCCL): picks this rank's GPU, cuda:<local
/// rank> (throws kindling::UsageError when that GPU does not exist, as NCCL cannot share
/// one GPU between ranks), makes it the current device, then the rendezvous and world group
/// as for gloo. Collective timeouts and NCCL errors are reported by c10d's watchdog as
/// errors on the waiting rank (TORCH_NCCL_ASYNC_ERROR_HANDLING, set to 1 unless the user
/// set it).
std::unique_ptr<Backend> make_nccl_backend(const WorldConfig& config);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
