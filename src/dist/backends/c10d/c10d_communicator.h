#pragma once
// Communicator over a LibTorch c10d::ProcessGroup (used by the gloo and nccl backends).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

/// What the c10d adapter does differently per engine: the backend's traits of the same names
/// (backend_traits.h), handed to every communicator of the backend.
struct C10dEngineFlags {
  bool widens_missing_dtypes = false;
  bool native_chunk_collectives = false;
  bool message_waits_may_time_out = true;
};

class C10dCommunicator : public Communicator {
 public:
  /// `flags`: the backend's traits (above). `owned`: kindling made `pg` and shuts it down when
  /// the communicator goes (finalize); a process group handed over by the user stays as it is.
  C10dCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> pg, C10dEngineFlags flags, bool owned = true);
  ~C10dCommunicator() override;
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
  /// nccl's own reduce-scatter and all-gather of flat tensors; other engines (gloo: see
  /// docs/performance.md, "ZeRO-1") keep the point-to-point defaults.
  OpPtr reduce_scatter(at::Tensor& output, at::Tensor& input, ReduceOp op, const ExchangeSlot& slot) override;
  OpPtr all_gather_into(at::Tensor& output, at::Tensor& input, const ExchangeSlot& slot) override;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  bool owned_ = true;
  C10dEngineFlags flags_;
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
