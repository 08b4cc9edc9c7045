#pragma once
// ZeroRedundancyOptimizer's state (kindling/nn/zero.h), shared by zero.cpp (construction, the
// layout, step) and zero_state.cpp (the consolidated state dict).
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <vector>

#include "kindling/nn/zero.h"
#include "zero_layout.h"

namespace kindling {
namespace nn {

struct ZeroRedundancyOptimizer::Impl {
  std::shared_ptr<zero::HookRecords> records = std::make_shared<zero::HookRecords>();
  std::shared_ptr<CommHook> hook;
  std::unique_ptr<torch::optim::OptimizerOptions> defaults;
  std::vector<at::Tensor> params;      // every parameter, group by group
  std::vector<std::size_t> group_of;   // each one's group
  std::optional<zero::Layout> layout;  // known at the first step
  dist::Group group;
  std::vector<zero::Piece> pieces;     // this rank's, in the inner optimizer's order
  std::vector<at::Tensor> views;       // each piece as a view of its parameter
  std::unique_ptr<torch::optim::Optimizer> inner;  // over `views`; null when this rank has none
  std::vector<int> inner_group;        // user group -> inner group (-1: no piece here)
  std::optional<c10::impl::GenericDict> pending;   // a loaded whole state, sharded at the layout

  // The parameters' layout from the hook's records (or every parameter whole, alone), this
  // rank's pieces and the inner optimizer; then any pending state. Throws as step() documents.
  void ensure_layout(const std::vector<torch::optim::OptimizerParamGroup>& groups);
  // A piece's part of a tensor shaped as its parameter (its gradient, a state tensor).
  at::Tensor part(const zero::Piece& piece, const at::Tensor& whole) const;
  // Shards `pending` into the inner optimizer (zero_state.cpp).
  void apply_pending();
};

}  // namespace nn
}  // namespace kindling
