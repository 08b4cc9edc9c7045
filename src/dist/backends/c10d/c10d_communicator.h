#pragma once
// Communicator over a LibTorch c10d::ProcessGroup (used by the gloo and nccl backends).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

class C10dCommunicator : public Communicator {
 public:
  /// `widens_missing_dtypes`: the backend's trait (backend_traits.h). `owned`: kindling made
  /// `pg` and shuts it down when the communicator goes (finalize); a process group handed over
  /// by the user stays as it is.
  C10dCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> pg, bool widens_missing_dtypes, bool owned = true);
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

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  bool owned_ = true;
  bool gloo_ = false;  // the engine lacks some dtypes (gloo): they are moved as bytes or reduced in a wider type
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
