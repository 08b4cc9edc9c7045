// ZeroRedundancyOptimizer's buckets, chunks and parts (zero_layout.h).
#include "zero_layout.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace kindling {
namespace nn {
namespace zero {

std::pair<int64_t, int64_t> chunk(int64_t numel, int q, int size) {
  const int64_t each = (numel + size - 1) / size;
  const int64_t first = std::min(numel, each * q);
  return {first, std::min(numel, first + each)};
}

void for_each_overlap(const Bucket& bucket, int64_t lo, int64_t hi,
                      const std::function<void(std::size_t, int64_t, int64_t, int64_t)>& f) {
  for (std::size_t m = 0; m < bucket.params.size(); ++m) {
    const int64_t start = std::max(lo, bucket.offsets[m]);
    const int64_t end = std::min(hi, bucket.offsets[m] + bucket.numels[m]);
    if (start < end) f(m, start - bucket.offsets[m], start, end - start);
  }
}

std::vector<Piece> Layout::pieces_of(int q, const std::vector<std::size_t>& group_of) const {
  std::vector<Piece> pieces;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const auto [lo, hi] = chunk(buckets[b].numel, q, size);
    for_each_overlap(buckets[b], lo, hi, [&](std::size_t m, int64_t offset, int64_t, int64_t length) {
      pieces.push_back({buckets[b].params[m], offset, length, static_cast<int64_t>(b), m});
    });
  }
  for (std::size_t p : unbucketed) pieces.push_back({p, 0, -1, -1, 0});
  std::stable_sort(pieces.begin(), pieces.end(),
                   [&](const Piece& a, const Piece& b) { return group_of[a.param] < group_of[b.param]; });
  return pieces;
}

}  // namespace zero
}  // namespace nn
}  // namespace kindling
