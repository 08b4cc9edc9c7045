#pragma once
// ZeroRedundancyOptimizer's view of the DDP buckets (kindling/nn/zero.h): what its comm hook
// records of each bucket, which chunk of a bucket each rank owns, and this rank's parts of the
// parameters. The exchanges themselves are in zero_exchange.h.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/nn/comm_hook.h"

namespace kindling {
namespace nn {
namespace zero {

// One DDP bucket as its hook saw it: the parameters laid end to end in its buffer.
struct BucketRecord {
  std::vector<const void*> params;  // TensorImpl addresses, in the buffer's order
  std::vector<int64_t> offsets;     // where each one starts in the buffer
  int64_t numel = 0;                // the buffer's elements
};

// What the hook tells the optimizer; shared by both, guarded by `mu` (the hook runs on the
// autograd thread, the step inside backward on the hook's own).
struct HookRecords {
  std::mutex mu;
  std::vector<BucketRecord> buckets;  // by bucket index
  std::optional<dist::Group> group;
  // Called (without `mu` held) once a bucket's reduce-scatter is in, on the hook's own thread
  // (zero_exchange.h); empty unless the optimizer steps inside backward
  // (ZeroOptions::overlap_with_ddp) and knows its layout.
  std::function<void(const GradBucket&)> after_reduce;
  // Called (without `mu` held) by DDP's wait for a bucket, once after_reduce ran, on the thread
  // that starts DDP's collectives: the bucket's all-gather starts there, in bucket order, so
  // that every rank starts its collectives in the same order (kindling::dist's rule; the hook's
  // thread only waits). Set together with after_reduce.
  std::function<void(const GradBucket&)> after_wait;
  // Set while buckets stepped inside backward wait for step() to receive the others' chunks: a
  // synchronised backward then is refused (its forward ran on half-updated parameters).
  bool awaiting_step = false;
};

// A bucket in the optimizer's terms: its members as indices into the optimizer's parameters.
struct Bucket {
  std::vector<std::size_t> params;
  std::vector<int64_t> offsets;
  std::vector<int64_t> numels;
  int64_t numel = 0;
};

// Elements [offset, offset + length) of parameter `param` (flattened); `bucket` is -1 for a
// parameter in no bucket (stepped whole by every rank, with its own gradient); `member` is the
// parameter's place in its bucket.
struct Piece {
  std::size_t param = 0;
  int64_t offset = 0;
  int64_t length = 0;
  int64_t bucket = -1;
  std::size_t member = 0;
};

// Chunk `q` of a bucket of `numel` elements cut in `size` equal chunks (the last ones shorter or
// empty): [first, second).
std::pair<int64_t, int64_t> chunk(int64_t numel, int q, int size);

// Calls f(member, member's offset into its parameter, position in the bucket, length) for each
// stretch of a member that lies in [lo, hi) of the bucket.
void for_each_overlap(const Bucket& bucket, int64_t lo, int64_t hi,
                      const std::function<void(std::size_t, int64_t, int64_t, int64_t)>& f);

struct Layout {
  int rank = 0;
  int size = 1;
  std::vector<Bucket> buckets;
  std::vector<std::size_t> unbucketed;  // parameters in no bucket

  // Rank q's pieces, ordered by parameter group (`group_of[param]`), then by bucket and position:
  // the order of the inner optimizer's parameters on rank q.
  std::vector<Piece> pieces_of(int q, const std::vector<std::size_t>& group_of) const;
};

}  // namespace zero
}  // namespace nn
}  // namespace kindling
