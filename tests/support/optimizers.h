#pragma once
// The ordinary LibTorch optimizers that kindling's DDP optimizers are checked against.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <utility>
#include <vector>

#include "support/models.h"

namespace kindling {
namespace testing {

/// Two parameter groups of `net`: layer a at the rate of `o` divided by `slowdown`, b and c at `o`'s.
inline std::vector<torch::optim::OptimizerParamGroup> two_groups(const Mlp3& net, const torch::optim::OptimizerOptions& o,
                                                                 double slowdown) {
  auto slow = o.clone();
  slow->set_lr(o.get_lr() / slowdown);
  std::vector<torch::Tensor> rest = net->b->parameters();
  for (const auto& p : net->c->parameters()) rest.push_back(p);
  return {torch::optim::OptimizerParamGroup(net->a->parameters(), std::move(slow)),
          torch::optim::OptimizerParamGroup(rest, o.clone())};
}

/// LibTorch's own SGD, Adam or AdamW (the kind `o` names) over `groups`.
inline std::unique_ptr<torch::optim::Optimizer> ordinary_optimizer(const torch::optim::OptimizerOptions& o,
                                                                   std::vector<torch::optim::OptimizerParamGroup> groups) {
  if (auto* s = dynamic_cast<const torch::optim::SGDOptions*>(&o)) return std::make_unique<torch::optim::SGD>(groups, *s);
  if (auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&o)) return std::make_unique<torch::optim::Adam>(groups, *a);
  return std::make_unique<torch::optim::AdamW>(groups, dynamic_cast<const torch::optim::AdamWOptions&>(o));
}

}  // namespace testing
}  // namespace kindling
