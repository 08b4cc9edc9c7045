#pragma once
// ZeroRedundancyOptimizer's state (kindling/nn/zero.h), shared by zero.cpp (construction, the
// layout, step) and zero_state.cpp (the consolidated state dict).
#include <ATen/core/Dict.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kindling/nn/zero.h"
#include "zero_exchange.h"

namespace torch {
namespace autograd {
struct Node;
}  // namespace autograd
}  // namespace torch

namespace kindling {
namespace nn {

struct ZeroRedundancyOptimizer::Impl : std::enable_shared_from_this<ZeroRedundancyOptimizer::Impl> {
  ZeroRedundancyOptimizer* owner = nullptr;  // the options' source while stepping inside backward
  ZeroOptions options;
  std::shared_ptr<zero::HookRecords> records = std::make_shared<zero::HookRecords>();
  std::shared_ptr<CommHook> hook;
  std::unique_ptr<torch::optim::OptimizerOptions> defaults;
  std::vector<at::Tensor> params;      // every parameter, group by group
  std::vector<std::size_t> group_of;   // each one's group
  std::optional<zero::Layout> layout;  // known at the first step
  dist::Group group;
  std::vector<zero::Piece> pieces;     // this rank's, by group, then bucket and position
  std::vector<at::Tensor> views;       // each piece as a view of its parameter
  // One inner optimizer per bucket (so that a bucket can step alone, inside backward), the last
  // one for the parameters in no bucket; null where this rank has no piece.
  std::vector<std::unique_ptr<torch::optim::Optimizer>> inner;
  std::vector<std::vector<int>> inner_group;            // [inner][user group] -> its group, -1: none
  std::vector<std::vector<std::size_t>> inner_pieces;   // [inner] -> pieces, in its parameters' order
  std::vector<std::unique_ptr<zero::Gather>> gathers;   // by bucket: its updated chunks in flight
  // By bucket: stepped inside backward (on the hook's thread), its all-gather not started yet
  // (it starts at DDP's wait for the bucket, records->after_wait, or else in step()).
  std::vector<char> gather_due;
  std::optional<c10::impl::GenericDict> pending;        // a loaded whole state, sharded at the layout
  // With overlap_with_ddp: each parameter's gradient accumulator, whose pre-hook refuses a
  // backward that reaches a parameter stepped inside an earlier backward not yet followed by
  // step() (stepped, by parameter, guarded by records->mu).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> accumulators;
  std::vector<char> stepped;

  // The parameters' layout from the hook's records (or every parameter whole, alone), this
  // rank's pieces and the inner optimizers; then any pending state. Throws as step() documents.
  void ensure_layout(const std::vector<torch::optim::OptimizerParamGroup>& groups);
  // The layout of the buckets the hook recorded (the group's, with this rank's place in it).
  // Throws as step() documents.
  zero::Layout read_layout();
  // The inner optimizers over this rank's pieces (views of the parameters), one per bucket.
  void make_inner(const std::vector<torch::optim::OptimizerParamGroup>& groups);
  // A piece's part of a tensor shaped as its parameter (its gradient, a state tensor).
  at::Tensor part(const zero::Piece& piece, const at::Tensor& whole) const;
  // Steps inner optimizer k with the groups' current options; each piece's gradient is its part
  // of `bucket_gradients[member]` when given (inside backward), else of its parameter's .grad().
  void step_inner(std::size_t k, const std::vector<at::Tensor>* bucket_gradients);
  // Bucket b stepped inside backward: its chunk stepped, its all-gather due.
  void step_in_backward(const GradBucket& bucket);
  // Starts bucket b's all-gather of this rank's updated chunk (on the thread that starts the
  // collectives, buckets in index order).
  void start_gather(std::size_t b);
  // With overlap_with_ddp: the views write the parameters without moving their autograd
  // version (a retained graph's second backward then meets guard_accumulations()'s refusal, not
  // autograd's version check), and step() moves every parameter's version itself.
  bool hides_versions() const;
  // Installs the accumulators' pre-hooks (see `accumulators`).
  void guard_accumulations();
  // This rank's per-parameter state, keyed by piece index (zero_state.cpp).
  c10::impl::GenericDict local_state() const;
  // Shards `pending` into the inner optimizers (zero_state.cpp).
  void apply_pending();
};

}  // namespace nn
}  // namespace kindling
