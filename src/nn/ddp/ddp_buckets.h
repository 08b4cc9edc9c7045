#pragma once
// Internal: which of DistributedDataParallel's gradient buckets each parameter goes to
// (src/nn/ddp/ddp_bucket_set.cpp makes the buckets' buffers from it).
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace kindling {
namespace nn {
namespace detail {

// The buckets, in launch order, each a list of indices into `params` (the rule: above its
// definition in ddp_buckets.cpp), filled in the order of `order` (a permutation of the indices of
// `params`). `params` is not empty and bucket_cap_mb is positive.
std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<at::Tensor>& params, double bucket_cap_mb,
                                                     const std::vector<std::size_t>& order);

// The order in which the buckets are first made: reverse registration order (n-1 ... 0).
std::vector<std::size_t> reverse_order(std::size_t n);

}  // namespace detail
}  // namespace nn
}  // namespace kindling
