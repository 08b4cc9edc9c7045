#pragma once
// Broadcasting many tensors at once: DDP's and the sharded model's parameters and buffers.
#include <ATen/core/Tensor.h>

#include <vector>

#include "kindling/dist/group.h"

namespace kindling {
namespace nn {
namespace detail {
// Broadcasts `tensors` from global rank `src` over `group`, packed into one buffer per (dtype,
// device); written in place. A collective over the group; throws what dist::broadcast throws.
void broadcast_coalesced(const std::vector<at::Tensor>& tensors, int src, const dist::Group& group);
}  // namespace detail
}  // namespace nn
}  // namespace kindling
