// Checkpoints of a sharded model and of its optimizer (kindling/handlers/checkpointing/
// stateful.h): saved whole, as the same model under DDP saves itself, loaded into this rank's
// shards at any world size.
#include <ATen/ATen.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kindling/error.h"
#include "kindling/handlers/checkpointing/stateful.h"

namespace kindling {
namespace handlers {
namespace {

class ShardedModuleState : public Stateful {
 public:
  ShardedModuleState(std::shared_ptr<torch::nn::Module> m, nn::ShardedModel* sharded)
      : module_(std::move(m)), sharded_(sharded) {
    KINDLING_CHECK(module_ != nullptr, "kindling::handlers::stateful: the sharded model's module is null");
  }
  StateDict state_dict() const override {
    StateDict sd = new_state_dict();
    for (auto& [name, whole] : sharded_->full_parameters()) sd.insert(name, whole);
    for (const auto& b : module_->named_buffers(true)) sd.insert(b.key(), b.value().detach());
    return sd;
  }
  void load_state_dict(const StateDict& state, bool strict) override {
    std::set<std::string> expected;
    std::vector<std::pair<std::string, at::Tensor>> whole;
    for (const auto& [name, shard] : sharded_->named_parameters()) {
      expected.insert(name);
      KINDLING_CHECK(state.contains(name) && state.at(name).isTensor(), "missing parameter '", name,
                     "' in the sharded model's state (a sharded model loads every parameter)");
      whole.emplace_back(name, state.at(name).toTensor());
    }
    std::vector<std::pair<at::Tensor, at::Tensor>> buffers;  // (destination, source), checked first
    for (const auto& b : module_->named_buffers(true)) {
      expected.insert(b.key());
      if (!state.contains(b.key())) {
        KINDLING_CHECK(!strict, "missing key '", b.key(), "' in the module's state");
        continue;
      }
      const at::Tensor src = state.at(b.key()).toTensor();
      KINDLING_CHECK(src.sizes() == b.value().sizes(), "key '", b.key(), "' has shape ", src.sizes(),
                     " in the checkpoint but ", b.value().sizes(), " in the module");
      buffers.emplace_back(b.value(), src);
    }
    if (strict)
      for (const auto& kv : state)
        KINDLING_CHECK(expected.count(kv.key().toStringRef()) > 0, "unexpected key '", kv.key().toStringRef(),
                       "' in the checkpoint: the module has no such parameter or buffer (another model?)");
    sharded_->load_full_parameters(whole);  // checks the shapes before it changes anything
    at::NoGradGuard no_grad;
    for (auto& [dst, src] : buffers) dst.copy_(src);
  }
  ShardedPart sharded_part() const override { return {sharded_, nullptr}; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  nn::ShardedModel* sharded_;
};

class ShardedOptimizerState : public Stateful {
 public:
  ShardedOptimizerState(torch::optim::Optimizer& o, nn::ShardedModel* sharded) : optimizer_(o), sharded_(sharded) {}
  StateDict state_dict() const override { return sharded_->full_optimizer_state_dict(optimizer_); }
  void load_state_dict(const StateDict& state, bool) override { sharded_->load_full_optimizer_state_dict(optimizer_, state); }
  ShardedPart sharded_part() const override { return {sharded_, &optimizer_}; }

 private:
  torch::optim::Optimizer& optimizer_;
  nn::ShardedModel* sharded_;
};

}  // namespace

std::shared_ptr<Stateful> stateful_sharded(std::shared_ptr<torch::nn::Module> module, nn::ShardedModel* sharded) {
  if (!sharded) return stateful(std::move(module));
  return std::make_shared<ShardedModuleState>(std::move(module), sharded);
}

std::shared_ptr<Stateful> stateful_sharded(torch::optim::Optimizer& optimizer, nn::ShardedModel* sharded) {
  if (!sharded) return stateful(optimizer);
  return std::make_shared<ShardedOptimizerState>(optimizer, sharded);
}

}  // namespace handlers
}  // namespace kindling
