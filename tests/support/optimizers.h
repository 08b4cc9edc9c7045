#pragma once
// The ordinary LibTorch optimizers that kindling's DDP optimizers are checked against.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
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

/// The kinds the DDP optimizer tests train with, by name: SGD with Nesterov momentum and weight
/// decay, Adam, AdamW with weight decay and amsgrad.
inline std::vector<std::pair<std::string, std::unique_ptr<torch::optim::OptimizerOptions>>> optimizer_kinds() {
  std::vector<std::pair<std::string, std::unique_ptr<torch::optim::OptimizerOptions>>> kinds;
  kinds.emplace_back("sgd", std::make_unique<torch::optim::SGDOptions>(
                                torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3)));
  kinds.emplace_back("adam", std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(1e-2)));
  kinds.emplace_back("adamw", std::make_unique<torch::optim::AdamWOptions>(
                                  torch::optim::AdamWOptions(1e-2).weight_decay(0.1).amsgrad(true)));
  return kinds;
}

}  // namespace testing
}  // namespace kindling
