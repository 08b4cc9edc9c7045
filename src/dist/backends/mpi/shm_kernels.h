#pragma once
// Internal to the mpi backend's shared-memory all-reduce (shm_allreduce.cpp): the byte copy
// and the reduction kernels it runs on the ranks' blocks.
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kindling/dist/reduce_op.h"

namespace kindling {
namespace dist {
namespace detail {

/// Copies `n` bytes with vector loads and stores (not memcpy: see shm_kernels.cpp).
void copy_bytes(void* dst, const void* src, std::size_t n);

/// Reduces the `count` elements of dtype `t` at each src[i], in order, into both out1 and out2.
void fold_any(at::ScalarType t, ReduceOp op, void* out1, void* out2, const std::vector<const void*>& src,
              std::int64_t count);

/// True when fold_any has a kernel for dtype `t` and `op`.
bool has_kernel(at::ScalarType t, ReduceOp op);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
