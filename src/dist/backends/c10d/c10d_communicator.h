#pragma once
// Communicator over a LibTorch c10d::ProcessGroup (used by the gloo and nccl backends).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/communicator.h"

namespace kindling {
namespace dist {
namespace detail {

class C10dCommunicator : public Communicator {
 public:
  /// `wait_slack`: extra time given to Work::wait beyond the group timeout, so that the
  /// engine's own timeout (which carries more detail) normally fires first.
  explicit C10dCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> pg);
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return pg_; }

  OpPtr all_reduce(at::Tensor& tensor, ReduceOp op) override;
  OpPtr broadcast(at::Tensor& tensor, int root) override;
  OpPtr all_gather(std::vector<at::Tensor>& outputs, at::Tensor& input) override;
  OpPtr reduce(at::Tensor& tensor, int root, ReduceOp op) override;
  OpPtr gather(std::vector<at::Tensor>& outputs, at::Tensor& input, int root) override;
  OpPtr scatter(at::Tensor& output, std::vector<at::Tensor>& inputs, int root) override;
  OpPtr all_to_all(at::Tensor& output, at::Tensor& input, std::vector<int64_t> output_splits,
                   std::vector<int64_t> input_splits) override;
  OpPtr barrier() override;
  OpPtr send(at::Tensor& tensor, int dst, int tag) override;
  OpPtr recv(at::Tensor& tensor, int src, int tag) override;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  bool gloo_ = false;  // Gloo lacks some dtypes: they are moved as bytes or reduced in a wider type
};

/// Python torch.distributed's store-based barrier (distributed_c10d.py::_store_based_barrier):
/// every rank adds 1 to "store_based_barrier_key:<index>" and waits until the count equals
/// `world_size`. kindling also sets "kindling/joined/<index>/<rank>" so that a timeout can
/// name the ranks that are missing. Throws kindling::TimeoutError.
void store_based_barrier(c10d::Store& store, int index, int rank, int world_size, std::chrono::milliseconds timeout,
                         const std::string& what);

/// Names the ranks in [0, world_size) that did not set "kindling/joined/<index>/<rank>".
std::string missing_joiners(c10d::Store& store, int index, int world_size);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
