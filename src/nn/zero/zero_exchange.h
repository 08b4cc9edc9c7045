#pragma once
// ZeroRedundancyOptimizer's exchanges (kindling/nn/zero.h): its comm hook's reduce-scatter of
// each bucket and the all-gather of the updated chunks, both kindling::dist collectives
// (reduce_scatter_async, all_gather_into_async: watched for stalls, fingerprinted, recorded),
// several buckets' in flight at once.
#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/nn/comm_hook.h"
#include "zero_layout.h"

namespace kindling {
namespace nn {
namespace zero {

// The comm hook of kindling/nn/zero.h: records each bucket, then starts its reduce-scatter
// (each rank gets the group's average of its own chunk; the chunks padded to one length). Named
// "zero_reduce_scatter"; with `steps` (overlap_with_ddp) "zero_reduce_scatter_and_step", and then
// a thread of the hook's own waits for each bucket's reduce-scatter as soon as it is started,
// divides it and calls the records' after_reduce, so that a bucket steps while backward goes on;
// DDP's wait for the bucket waits for that thread, then calls the records' after_wait on DDP's
// own thread (where the bucket's all-gather starts: every rank starts its collectives in one
// order there).
std::shared_ptr<CommHook> make_hook(std::shared_ptr<HookRecords> records, bool steps);

// A bucket's updated chunks on their way to every rank: kindling::dist::all_gather_into_async
// of each rank's chunk (padded to the chunks' length), so that several buckets' can be in flight
// at once.
class Gather {
 public:
  // Copies this rank's chunk of `bucket` out of the parameters (`params`: the optimizer's, by
  // its index) and starts the all-gather over `group` (every member, buckets in one order).
  Gather(const Bucket& bucket, const std::vector<at::Tensor>& params, const dist::Group& group);
  // Waits for the all-gather, then copies the other ranks' chunks into the parameters. Throws
  // what the collective throws (kindling::TimeoutError, kindling::CommunicationError).
  void finish();

 private:
  Bucket bucket_;
  std::vector<at::Tensor> flat_;  // the members' parameters, flattened
  int rank_;
  int size_;
  int64_t each_ = 0;  // a chunk's length
  at::Tensor mine_;   // this rank's chunk, as sent
  at::Tensor all_;    // every rank's chunk, end to end
  dist::Work work_;
};

}  // namespace zero
}  // namespace nn
}  // namespace kindling
