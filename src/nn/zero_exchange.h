#pragma once
// ZeroRedundancyOptimizer's exchanges (kindling/nn/zero.h): its comm hook's reduce-scatter of
// each bucket and the all-gather of the updated chunks, both by point-to-point exchanges.
#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/nn/comm_hook.h"
#include "zero_layout.h"

namespace kindling {
namespace nn {
namespace zero {

// The comm hook of kindling/nn/zero.h: records each bucket, then reduce-scatters it (each rank
// gets the group's average of its own chunk). Named "zero_reduce_scatter"; with `steps`
// (overlap_with_ddp) "zero_reduce_scatter_and_step", and then a thread of the hook's own waits
// for each bucket's exchanges as soon as they are posted, sums them and calls the records'
// after_reduce, so that a bucket steps and sends its update while backward goes on; DDP's wait
// for the bucket waits for that thread.
std::shared_ptr<CommHook> make_hook(std::shared_ptr<HookRecords> records, bool steps);

// A bucket's updated chunks on their way to every rank: an all-gather by point-to-point
// exchanges, so that several buckets' can be in flight at once and overlap the reduce-scatter.
class Gather {
 public:
  // Copies this rank's chunk of bucket `index` out of the parameters (`params`: the optimizer's,
  // by its index) and posts it to every other rank of `group`, and the receives of theirs.
  Gather(const Bucket& bucket, int64_t index, const std::vector<at::Tensor>& params, const dist::Group& group);
  // Waits for the exchanges, then copies the other ranks' chunks into the parameters. Throws
  // what the exchanges throw (kindling::TimeoutError, kindling::CommunicationError).
  void finish();

 private:
  Bucket bucket_;
  std::vector<at::Tensor> flat_;  // the members' parameters, flattened
  int rank_;
  std::vector<at::Tensor> received_;  // by rank; this rank's own: its chunk as sent
  std::vector<dist::Work> works_;
};

}  // namespace zero
}  // namespace nn
}  // namespace kindling
