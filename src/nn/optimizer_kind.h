#pragma once
// The optimizers kindling runs in pieces (ZeroRedundancyOptimizer, OptimizerInBackward):
// LibTorch's SGD, Adam and AdamW, whose updates are element by element, made from their options.
#include <ATen/core/Dict.h>
#include <torch/optim/optimizer.h>

#include "kindling/engine/state_dict.h"

#include <memory>
#include <vector>

namespace kindling {
namespace nn {
namespace detail {

// The ordinary LibTorch optimizer of the kind `defaults` names, over `groups`; null for a kind
// other than SGD, Adam and AdamW.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const torch::optim::OptimizerOptions& defaults,
                                                        std::vector<torch::optim::OptimizerParamGroup> groups);

// `groups` after checking, for the optimizer `who` names: `defaults` of a supported kind (named in
// the error otherwise), every group's options of that kind, at least one parameter, and
// LibTorch's own checks of the options. Throws kindling::UsageError (or LibTorch's c10::Error).
std::vector<torch::optim::OptimizerParamGroup> checked_groups(std::vector<torch::optim::OptimizerParamGroup> groups,
                                                              const torch::optim::OptimizerOptions& defaults,
                                                              const char* who);

// For an optimizer that keeps its per-parameter state elsewhere (its own state() stays empty):
// checks a whole state in torch's layout against its parameters (each entry names one that
// exists, each tensor has that parameter's shape, the groups fit), then loads the groups' options
// and returns the per-parameter states. Throws kindling::UsageError, the message starting with
// `who`, before changing anything.
c10::impl::GenericDict load_group_options(torch::optim::Optimizer& optimizer, const StateDict& state, const char* who);

}  // namespace detail
}  // namespace nn
}  // namespace kindling
