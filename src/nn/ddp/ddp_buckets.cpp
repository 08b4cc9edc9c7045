// The rule that sorts DistributedDataParallel's parameters into gradient buckets.
#include "nn/ddp/ddp_buckets.h"

#include <algorithm>
#include <cstdint>

namespace kindling {
namespace nn {
namespace detail {

// The bucketing rule, as it stands:
//  * `params` are the module's parameters that require a gradient, in named_parameters()
//    order (registration order). They are taken in the order `order` gives: at first reverse
//    registration order, the last one first (backward computes the last layers' gradients
//    first); after the first synchronised backward, the order in which the group's first rank
//    saw the gradients become ready (see "rebuilt" below). Bucket 0 is launched first.
//  * A parameter joins the bucket opened last, and only that one, when it has the same dtype
//    and device as that bucket's first parameter and the bucket's bytes so far (the sum of
//    its members' nbytes()) are below the bucket's cap; else it opens a new bucket. The cap
//    is checked before the parameter is added, so a bucket may end above its cap by its last
//    member; parameters whose dtypes or devices alternate open a new bucket at each change.
//  * The cap: bucket_cap_mb * 2^20 bytes (truncated to an integer); bucket 0's cap is the
//    smaller of that and 1 MiB (2^20 bytes), so that the first all-reduce starts early.
//  * Within a bucket the members keep the order in which they joined, which is also the order
//    of their gradients in the bucket's flat buffer.
//  * Rebuilt once (src/nn/ddp/ddp_rebuild.cpp, rebuild_buckets), as torch's Reducer does: at the end of
//    the first synchronised backward, without find_unused_parameters or with static_graph, from
//    the order in which the group's first rank saw the gradients become ready (broadcast, so
//    every rank buckets alike), the parameters it did not see after them in reverse
//    registration order; the same caps. With find_unused_parameters alone the buckets stay as
//    made (which parameters take part may change from one iteration to the next), and under a
//    communication hook (a hook may keep state by bucket, e.g. PowerSGD's error feedback).
std::vector<std::size_t> reverse_order(std::size_t n) {
  std::vector<std::size_t> order(n);
  for (std::size_t k = 0; k < n; ++k) order[k] = n - 1 - k;
  return order;
}

std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<at::Tensor>& params, double bucket_cap_mb,
                                                     const std::vector<std::size_t>& order) {
  const int64_t first_cap = std::min<int64_t>(1 << 20, static_cast<int64_t>(bucket_cap_mb * (1 << 20)));
  const int64_t cap = static_cast<int64_t>(bucket_cap_mb * (1 << 20));
  std::vector<std::vector<std::size_t>> groups;
  std::vector<int64_t> bytes;
  for (const std::size_t k : order) {
    const auto& p = params[k];
    bool placed = false;
    if (!groups.empty()) {
      auto& last = groups.back();
      const auto& q = params[last.front()];
      const int64_t limit = groups.size() == 1 ? first_cap : cap;
      if (q.scalar_type() == p.scalar_type() && q.device() == p.device() && bytes.back() < limit) {
        last.push_back(k);
        bytes.back() += static_cast<int64_t>(p.nbytes());
        placed = true;
      }
    }
    if (!placed) {
      groups.push_back({k});
      bytes.push_back(static_cast<int64_t>(p.nbytes()));
    }
  }
  return groups;
}

}  // namespace detail
}  // namespace nn
}  // namespace kindling
