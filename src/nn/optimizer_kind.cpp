// The optimizers kindling runs in pieces (optimizer_kind.h).
#include "optimizer_kind.h"

#include <c10/util/Type.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <string>
#include <typeinfo>
#include <utility>

#include "kindling/error.h"
#include "kindling/nn/optimizer_state.h"

namespace kindling {
namespace nn {
namespace detail {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamGroup;

// The ordinary LibTorch optimizer of the kind `defaults` names, over `groups`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& defaults,
                                                        std::vector<OptimizerParamGroup> groups) {
  if (auto* s = dynamic_cast<const torch::optim::SGDOptions*>(&defaults))
    return std::make_unique<torch::optim::SGD>(std::move(groups), *s);
  if (auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&defaults))
    return std::make_unique<torch::optim::Adam>(std::move(groups), *a);
  if (auto* w = dynamic_cast<const torch::optim::AdamWOptions*>(&defaults))
    return std::make_unique<torch::optim::AdamW>(std::move(groups), *w);
  return nullptr;
}

// Checks the kind of every group's options against `defaults`, and that there is a parameter.
std::vector<OptimizerParamGroup> checked_groups(std::vector<OptimizerParamGroup> groups, const OptimizerOptions& defaults,
                                                const char* who) {
  const std::string what = std::string(who) + ": ";
  KINDLING_CHECK(make_optimizer(defaults, {}) != nullptr, what, "the options are of type '", c10::demangle(typeid(defaults).name()),
                 "', but only torch::optim::SGDOptions, AdamOptions and AdamWOptions are supported (their updates "
                 "are element by element, so a part of a parameter steps as the whole would)");
  std::size_t count = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    count += groups[g].params().size();
    KINDLING_CHECK(!groups[g].has_options() || typeid(groups[g].options()) == typeid(defaults), what,
                   "parameter group ", g, " has options of type '", c10::demangle(typeid(groups[g].options()).name()),
                   "' but the defaults are '", c10::demangle(typeid(defaults).name()), "'; give every group the same kind");
  }
  KINDLING_CHECK(count > 0, what, "no parameter to optimize; pass the model's parameters()");
  // LibTorch's own checks of the options (nesterov without momentum, negative rates...) now.
  make_optimizer(defaults, groups);
  return groups;
}

c10::impl::GenericDict load_group_options(torch::optim::Optimizer& optimizer, const StateDict& state, const char* who) {
  KINDLING_CHECK(state.contains("state") && state.contains("param_groups"), who,
                 ": missing key 'param_groups' or 'state'");
  std::vector<at::Tensor> params;
  for (const auto& g : optimizer.param_groups())
    for (const auto& p : g.params()) params.push_back(p);
  const auto states = state.at("state").toGenericDict();
  for (const auto& kv : states) {
    const int64_t index = kv.key().toInt();
    KINDLING_CHECK(index >= 0 && index < static_cast<int64_t>(params.size()), who, ": the state names parameter ",
                   index, " but the optimizer has ", params.size());
    for (const auto& entry : kv.value().toGenericDict()) {
      if (!entry.value().isTensor()) continue;
      const at::Tensor t = entry.value().toTensor();
      KINDLING_CHECK(t.sizes() == params[index].sizes(), who, ": the state of parameter ", index, " has a '",
                     entry.key().toStringRef(), "' of shape ", t.sizes(), " but the parameter's shape is ",
                     params[index].sizes(), "; the state was saved from a different model");
    }
  }
  // Checked; the options through the ordinary loader (which checks the groups first).
  StateDict options = new_state_dict();
  options.insert("param_groups", state.at("param_groups"));
  options.insert("state", c10::impl::GenericDict(c10::IntType::get(), c10::AnyType::get()));
  load_optimizer_state_dict(optimizer, options);
  return states;
}

}  // namespace detail
}  // namespace nn
}  // namespace kindling
