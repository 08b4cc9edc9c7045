#pragma once
// The optimizers kindling runs in pieces (ZeroRedundancyOptimizer, OptimizerInBackward):
// LibTorch's SGD, Adam and AdamW, whose updates are element by element, made from their options.
#include <ATen/core/Dict.h>
#include <torch/optim/optimizer.h>

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

// Checks a whole state in torch's layout against `params` (every optimizer parameter, group by
// group): each entry names a parameter that exists and each of its tensors has that parameter's
// shape. Throws kindling::UsageError, the message starting with `who`.
void check_whole_state(const std::vector<at::Tensor>& params, const c10::impl::GenericDict& states, const char* who);

}  // namespace detail
}  // namespace nn
}  // namespace kindling
