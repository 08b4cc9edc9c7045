// State-dict adapters: modules (names as torch's state_dict), optimizers (torch's dict
// layout for SGD / Adam / AdamW), engines and RNG states.
#include "kindling/handlers/checkpointing/stateful.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kindling/error.h"
#include "kindling/log.h"
#include "kindling/metrics/metric.h"
#include "kindling/nn/optimizer_state.h"
#include "handlers/checkpointing/deep_copy.h"

namespace kindling {
namespace handlers {
namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

class ModuleState : public Stateful {
 public:
  explicit ModuleState(std::shared_ptr<torch::nn::Module> m) : module_(std::move(m)) {
    KINDLING_CHECK(module_ != nullptr, "kindling::handlers::stateful: the module is null");
    for (const auto& p : module_->parameters())
      KINDLING_CHECK(nn::detail::sharded_role(p) == 0, "kindling::handlers::stateful: this module's parameters are "
                     "managed by a sharded model (FullyShardedDataParallel), whose module holds no whole weights "
                     "between steps: save the model itself, stateful(model)");
  }
  StateDict state_dict() const override {
    StateDict sd = new_state_dict();
    for (const auto& p : module_->named_parameters(true)) sd.insert(p.key(), p.value().detach());
    for (const auto& b : module_->named_buffers(true)) sd.insert(b.key(), b.value().detach());
    return sd;
  }
  void load_state_dict(const StateDict& state, bool strict) override {
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (destination, source), checked first
    std::set<std::string> expected;
    auto plan = [&](const std::string& key, const at::Tensor& dst) {
      expected.insert(key);
      if (!state.contains(key)) {
        KINDLING_CHECK(!strict, "missing key '", key, "' (", shape_of(dst), ") in the module's state");
        return;
      }
      const c10::IValue v = state.at(key);
      KINDLING_CHECK(v.isTensor(), "key '", key, "' holds a ", v.tagKind(), ", expected a tensor");
      const at::Tensor src = v.toTensor();
      KINDLING_CHECK(src.sizes() == dst.sizes(), "key '", key, "' has shape ", shape_of(src), " in the checkpoint but ",
                     shape_of(dst), " in the module (another model or configuration?)");
      copies.emplace_back(dst, src);
    };
    for (const auto& p : module_->named_parameters(true)) plan(p.key(), p.value());
    for (const auto& b : module_->named_buffers(true)) plan(b.key(), b.value());
    if (strict) {
      for (const auto& kv : state) {
        KINDLING_CHECK(expected.count(kv.key().toStringRef()) > 0, "unexpected key '", kv.key().toStringRef(),
                       "' in the checkpoint: the module has no such parameter or buffer (another model?)");
      }
    }
    at::NoGradGuard no_grad;
    for (auto& [dst, src] : copies) dst.copy_(src);
  }

 private:
  std::shared_ptr<torch::nn::Module> module_;
};

// An optimizer of any kind (nn::any_optimizer_state_dict: torch's layout or LibTorch's archive).
class OptimizerState : public Stateful {
 public:
  explicit OptimizerState(torch::optim::Optimizer& o) : optimizer_(o) {}
  StateDict state_dict() const override { return nn::any_optimizer_state_dict(optimizer_); }
  void load_state_dict(const StateDict& state, bool) override { nn::load_any_optimizer_state_dict(optimizer_, state); }

 private:
  torch::optim::Optimizer& optimizer_;
};

// ZeroRedundancyOptimizer, OptimizerInBackward: the whole state as the optimizer gives it.
class SelfStatedOptimizerState : public Stateful {
 public:
  explicit SelfStatedOptimizerState(nn::SelfStatedOptimizer& o) : optimizer_(o) {}
  StateDict state_dict() const override { return optimizer_.state_dict(); }
  void load_state_dict(const StateDict& state, bool) override { optimizer_.load_state_dict(state); }

 private:
  nn::SelfStatedOptimizer& optimizer_;
};

class EngineState : public Stateful {
 public:
  explicit EngineState(engine::Engine& e) : engine_(e) {}
  StateDict state_dict() const override { return engine_.state_dict(); }
  void load_state_dict(const StateDict& state, bool) override { engine_.load_state_dict(state); }

 private:
  engine::Engine& engine_;
};

class MetricState : public Stateful {
 public:
  explicit MetricState(std::shared_ptr<metrics::Metric> m) : metric_(std::move(m)) {}
  StateDict state_dict() const override { return metric_->state_dict(); }
  void load_state_dict(const StateDict& state, bool) override { metric_->load_state_dict(state); }

 private:
  std::shared_ptr<metrics::Metric> metric_;
};

// Named objects saved as one dict entry (stateful(Objects)).
class GroupState : public Stateful {
 public:
  explicit GroupState(Objects members) : members_(std::move(members)) {
    KINDLING_CHECK(!members_.empty(), "kindling::handlers::stateful: the group of objects is empty");
    std::set<std::string> names;
    for (const auto& [name, object] : members_) {
      KINDLING_CHECK(object != nullptr, "kindling::handlers::stateful: the group's object '", name, "' is null");
      KINDLING_CHECK(names.insert(name).second, "kindling::handlers::stateful: the group has two objects named '", name,
                     "'");
    }
  }
  StateDict state_dict() const override {
    StateDict sd = new_state_dict();
    for (const auto& [name, object] : members_) sd.insert(name, object->state_dict());
    return sd;
  }
  void load_state_dict(const StateDict& state, bool strict) override {
    std::vector<StateDict> states;
    for (const auto& [name, object] : members_) {
      KINDLING_CHECK(state.contains(name), "the group has no entry '", name, "' (it holds: ", keys_of(state), ")");
      const c10::IValue& v = state.at(name);
      KINDLING_CHECK(v.isGenericDict(), "the group's entry '", name, "' is a ", v.tagKind(), ", not a state dict");
      states.push_back(v.toGenericDict());
    }
    KINDLING_CHECK(!strict || state.size() == members_.size(), "the group's state has entries no object of it has (it ",
                   "holds: ", keys_of(state), "); load with strict=false to ignore them");
    std::vector<StateDict> before;
    for (const auto& member : members_)
      before.push_back(::kindling::detail::deep_copy(member.second->state_dict()).toGenericDict());
    size_t done = 0;
    try {
      for (; done < members_.size(); ++done) members_[done].second->load_state_dict(states[done], strict);
    } catch (const std::exception& e) {
      for (size_t i = 0; i < done; ++i) members_[i].second->load_state_dict(before[i], false);
      KINDLING_CHECK(false, "the group's object '", members_[done].first, "': ", e.what());
    }
  }

 private:
  static std::string keys_of(const StateDict& state) {
    std::string keys;
    for (const auto& kv : state) keys += (keys.empty() ? "" : ", ") + kv.key().toStringRef();
    return keys;
  }
  Objects members_;
};

class RngStates : public Stateful {
 public:
  StateDict state_dict() const override {
    StateDict sd = new_state_dict();
    sd.insert("torch_cpu", at::detail::getDefaultCPUGenerator().get_state());
    if (at::hasCUDA()) {
      for (int64_t i = 0; i < at::detail::getCUDAHooks().getNumGPUs(); ++i) {
        sd.insert("torch_cuda_" + std::to_string(i),
                  at::globalContext()
                      .defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)))
                      .get_state());
      }
    }
    return sd;
  }
  void load_state_dict(const StateDict& state, bool) override {
    KINDLING_CHECK(state.contains("torch_cpu"), "missing key 'torch_cpu' in the RNG states");
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(cpu.mutex());
      cpu.set_state(state.at("torch_cpu").toTensor());
    }
    if (!at::hasCUDA()) return;
    for (int64_t i = 0; i < at::detail::getCUDAHooks().getNumGPUs(); ++i) {
      const std::string key = "torch_cuda_" + std::to_string(i);
      if (!state.contains(key)) continue;
      at::Generator g = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(state.at(key).toTensor());
    }
  }
};

}  // namespace

std::shared_ptr<Stateful> stateful(std::shared_ptr<torch::nn::Module> module) {
  return std::make_shared<ModuleState>(std::move(module));
}
std::shared_ptr<Stateful> stateful(torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      KINDLING_CHECK(nn::detail::sharded_role(p) == 0, "kindling::handlers::stateful: this optimizer steps a sharded "
                     "model's shards; alone it would save this rank's parts only: save it with "
                     "stateful(optimizer, model)");
  if (auto* own = dynamic_cast<nn::SelfStatedOptimizer*>(&optimizer))
    return std::make_shared<SelfStatedOptimizerState>(*own);
  return std::make_shared<OptimizerState>(optimizer);
}
std::shared_ptr<Stateful> stateful(engine::Engine& engine) { return std::make_shared<EngineState>(engine); }
std::shared_ptr<Stateful> stateful(std::shared_ptr<metrics::Metric> metric) {
  KINDLING_CHECK(metric != nullptr, "kindling::handlers::stateful: the metric is null");
  return std::make_shared<MetricState>(std::move(metric));
}
std::shared_ptr<Stateful> stateful(std::shared_ptr<nn::CommHook> hook) {
  KINDLING_CHECK(hook != nullptr, "kindling::handlers::stateful: the communication hook is null");
  struct HookState : Stateful {
    explicit HookState(std::shared_ptr<nn::CommHook> h) : hook(std::move(h)) {}
    StateDict state_dict() const override { return hook->state_dict(); }
    void load_state_dict(const StateDict& state, bool) override { hook->load_state_dict(state); }
    std::shared_ptr<nn::CommHook> hook;
  };
  return std::make_shared<HookState>(std::move(hook));
}
std::shared_ptr<Stateful> stateful(Objects objects) { return std::make_shared<GroupState>(std::move(objects)); }
std::shared_ptr<Stateful> rng_states() { return std::make_shared<RngStates>(); }

RandomStateKeeper::RandomStateKeeper() : saved_(RngStates().state_dict()) {}

RandomStateKeeper::~RandomStateKeeper() {
  try {
    RngStates().load_state_dict(saved_, true);
  } catch (const std::exception& e) {
    kindling::log(
        LogLevel::kError,
        std::string("kindling::handlers::keep_random_state: the random states could not be restored: ") + e.what());
  }
}

}  // namespace handlers

namespace detail {

c10::IValue deep_copy(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().detach().clone();
  if (value.isGenericDict()) {
    const c10::impl::GenericDict in = value.toGenericDict();
    c10::impl::GenericDict out(in.keyType(), in.valueType());
    for (const auto& entry : in) out.insert(entry.key(), deep_copy(entry.value()));
    return out;
  }
  if (value.isList()) {
    const c10::List<c10::IValue> in = value.toList();
    c10::impl::GenericList out(in.elementType());
    for (const c10::IValue& element : in) out.push_back(deep_copy(element));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& element : value.toTupleRef().elements()) elements.push_back(deep_copy(element));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

}  // namespace detail
}  // namespace kindling
