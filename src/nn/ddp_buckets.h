#pragma once
// Internal: which of DistributedDataParallel's gradient buckets each parameter goes to
// (src/nn/ddp.cpp makes the buckets' buffers from it).
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace kindling {
namespace nn {
namespace detail {

// The buckets, in launch order, each a list of indices into `params` (the rule: above its
// definition in ddp_buckets.cpp). `params` is not empty and bucket_cap_mb is positive.
std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<at::Tensor>& params, double bucket_cap_mb);

}  // namespace detail
}  // namespace nn
}  // namespace kindling
