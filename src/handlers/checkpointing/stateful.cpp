// State-dict adapters: modules (names as torch's state_dict), optimizers (torch's dict
// layout for SGD / Adam / AdamW), engines and RNG states.
#include "kindling/handlers/checkpointing/stateful.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "kindling/error.h"
#include "kindling/metrics/metric.h"

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

// The optimizer's parameters in order, and a key -> index map for its state. The state's
// key is the TensorImpl's address: as a string in LibTorch 1.x, the void* itself in 2.x.
using StateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
[[maybe_unused]] std::string to_state_key(void* impl, std::string*) {
  std::ostringstream s;
  s << impl;
  return s.str();
}
[[maybe_unused]] void* to_state_key(void* impl, void**) { return impl; }
StateKey state_key(const at::Tensor& p) {
  return to_state_key(p.unsafeGetTensorImpl(), static_cast<StateKey*>(nullptr));
}

c10::IValue tensor_or_none(const at::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }
at::Tensor tensor_of(const c10::impl::GenericDict& d, const char* key) {
  if (!d.contains(key) || d.at(key).isNone()) return at::Tensor();
  return d.at(key).toTensor();
}

class OptimizerState : public Stateful {
 public:
  explicit OptimizerState(torch::optim::Optimizer& o) : optimizer_(o) {}

  StateDict state_dict() const override {
    StateDict sd = new_state_dict();
    if (!known()) {
      torch::serialize::OutputArchive archive;
      optimizer_.save(archive);
      std::ostringstream bytes;
      archive.save_to(bytes);
      const std::string s = bytes.str();
      sd.insert("torch_archive",
                at::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())}, at::kByte).clone());
      return sd;
    }
    c10::impl::GenericDict states(c10::IntType::get(), c10::AnyType::get());
    c10::impl::GenericList groups(c10::AnyType::get());
    int64_t index = 0;
    for (const auto& group : optimizer_.param_groups()) {
      c10::impl::GenericDict g(c10::StringType::get(), c10::AnyType::get());
      options_to(group.options(), g);
      c10::List<int64_t> params;
      for (const auto& p : group.params()) {
        auto it = optimizer_.state().find(state_key(p));
        if (it != optimizer_.state().end()) states.insert(index, param_state_to(*it->second));
        params.push_back(index++);
      }
      g.insert("params", params);
      groups.push_back(g);
    }
    sd.insert("state", states);
    sd.insert("param_groups", groups);
    return sd;
  }

  void load_state_dict(const StateDict& state, bool) override {
    if (state.contains("torch_archive")) {
      // LibTorch's archive reader is its TorchScript loader, which can run code a crafted
      // file holds: it is reached only for the optimizer kinds kindling cannot save itself.
      KINDLING_CHECK(!known(),
                     "the checkpoint holds a LibTorch optimizer archive (saved from an optimizer other "
                     "than SGD/Adam/AdamW), but this optimizer is SGD, Adam or AdamW; load it into the "
                     "kind of optimizer that saved it");
      const at::Tensor bytes = state.at("torch_archive").toTensor().contiguous();
      KINDLING_CHECK(bytes.scalar_type() == at::kByte && bytes.dim() == 1,
                     "the optimizer's 'torch_archive' entry must be a 1-D uint8 tensor, got ",
                     c10::toString(bytes.scalar_type()), " of shape ", bytes.sizes());
      std::istringstream in(std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel()));
      torch::serialize::InputArchive archive;
      archive.load_from(in);
      optimizer_.load(archive);
      return;
    }
    KINDLING_CHECK(known(), "the checkpoint holds an SGD/Adam/AdamW state, but this optimizer is another kind");
    KINDLING_CHECK(state.contains("param_groups") && state.contains("state"),
                   "missing key 'param_groups' or 'state' in the optimizer's state");
    const auto groups = state.at("param_groups").toList();
    auto& mine = optimizer_.param_groups();
    KINDLING_CHECK(groups.size() == mine.size(), "the checkpoint has ", groups.size(),
                   " parameter groups but the optimizer has ", mine.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const auto n = groups.get(i).toGenericDict().at("params").toIntList().size();
      KINDLING_CHECK(n == mine[i].params().size(), "parameter group ", i, " has ", n,
                     " parameters in the checkpoint but ", mine[i].params().size(), " in the optimizer");
    }
    const auto states = state.at("state").toGenericDict();
    check_state_shapes(states);
    // Checked: apply.
    int64_t index = 0;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      options_from(groups.get(i).toGenericDict(), mine[i].options());
      for (const auto& p : mine[i].params()) {
        if (states.contains(index)) {
          optimizer_.state()[state_key(p)] = param_state_from(states.at(index).toGenericDict());
        } else {
          optimizer_.state().erase(state_key(p));
        }
        ++index;
      }
    }
  }

 private:
  bool known() const {
    return dynamic_cast<torch::optim::SGD*>(&optimizer_) || dynamic_cast<torch::optim::Adam*>(&optimizer_) ||
           dynamic_cast<torch::optim::AdamW*>(&optimizer_);
  }
  bool sgd() const { return dynamic_cast<torch::optim::SGD*>(&optimizer_) != nullptr; }

  // Every per-parameter buffer the checkpoint holds must have its parameter's shape: a wrong
  // one would otherwise only fail (or broadcast silently) at the next step.
  void check_state_shapes(const c10::impl::GenericDict& states) const {
    int64_t index = 0;
    const auto& groups = optimizer_.param_groups();
    for (std::size_t i = 0; i < groups.size(); ++i) {
      for (const auto& p : groups[i].params()) {
        if (states.contains(index)) {
          const auto entry = states.at(index).toGenericDict();
          for (const char* key : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
            const at::Tensor t = tensor_of(entry, key);
            KINDLING_CHECK(!t.defined() || t.sizes() == p.sizes(), "the optimizer state of parameter ", index,
                           " (group ", i, ") has a '", key, "' of shape ", t.sizes(), " but the parameter's shape is ",
                           p.sizes(), "; the checkpoint was saved from a different model");
          }
        }
        ++index;
      }
    }
  }

  static void options_to(const torch::optim::OptimizerOptions& o, c10::impl::GenericDict& g) {
    if (auto* s = dynamic_cast<const torch::optim::SGDOptions*>(&o)) {
      g.insert("lr", s->lr());
      g.insert("momentum", s->momentum());
      g.insert("dampening", s->dampening());
      g.insert("weight_decay", s->weight_decay());
      g.insert("nesterov", s->nesterov());
    } else if (auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&o)) {
      adam_to(*a, g);
    } else if (auto* w = dynamic_cast<const torch::optim::AdamWOptions*>(&o)) {
      adam_to(*w, g);
    }
  }
  template <typename O>
  static void adam_to(const O& a, c10::impl::GenericDict& g) {
    g.insert("lr", a.lr());
    g.insert("betas", c10::ivalue::Tuple::create(std::get<0>(a.betas()), std::get<1>(a.betas())));
    g.insert("eps", a.eps());
    g.insert("weight_decay", a.weight_decay());
    g.insert("amsgrad", a.amsgrad());
  }
  static void options_from(const c10::impl::GenericDict& g, torch::optim::OptimizerOptions& o) {
    if (auto* s = dynamic_cast<torch::optim::SGDOptions*>(&o)) {
      s->lr(g.at("lr").toDouble()).momentum(g.at("momentum").toDouble()).dampening(g.at("dampening").toDouble());
      s->weight_decay(g.at("weight_decay").toDouble()).nesterov(g.at("nesterov").toBool());
    } else if (auto* a = dynamic_cast<torch::optim::AdamOptions*>(&o)) {
      adam_from(g, *a);
    } else if (auto* w = dynamic_cast<torch::optim::AdamWOptions*>(&o)) {
      adam_from(g, *w);
    }
  }
  template <typename O>
  static void adam_from(const c10::impl::GenericDict& g, O& a) {
    const auto betas = g.at("betas").toTuple()->elements();
    a.lr(g.at("lr").toDouble()).eps(g.at("eps").toDouble()).weight_decay(g.at("weight_decay").toDouble());
    a.amsgrad(g.at("amsgrad").toBool()).betas(std::make_tuple(betas[0].toDouble(), betas[1].toDouble()));
  }
  c10::impl::GenericDict param_state_to(const torch::optim::OptimizerParamState& s) const {
    c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
    if (auto* m = dynamic_cast<const torch::optim::SGDParamState*>(&s)) {
      d.insert("momentum_buffer", tensor_or_none(m->momentum_buffer()));
    } else if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(&s)) {
      adam_state_to(*a, d);
    } else if (auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(&s)) {
      adam_state_to(*w, d);
    }
    return d;
  }
  template <typename S>
  static void adam_state_to(const S& a, c10::impl::GenericDict& d) {
    d.insert("step", a.step());
    d.insert("exp_avg", tensor_or_none(a.exp_avg()));
    d.insert("exp_avg_sq", tensor_or_none(a.exp_avg_sq()));
    d.insert("max_exp_avg_sq", tensor_or_none(a.max_exp_avg_sq()));
  }
  std::unique_ptr<torch::optim::OptimizerParamState> param_state_from(const c10::impl::GenericDict& d) const {
    if (sgd()) {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(tensor_of(d, "momentum_buffer"));
      return s;
    }
    if (dynamic_cast<torch::optim::Adam*>(&optimizer_)) return adam_state_from<torch::optim::AdamParamState>(d);
    return adam_state_from<torch::optim::AdamWParamState>(d);
  }
  template <typename S>
  static std::unique_ptr<torch::optim::OptimizerParamState> adam_state_from(const c10::impl::GenericDict& d) {
    auto s = std::make_unique<S>();
    s->step(d.at("step").toInt());
    s->exp_avg(tensor_of(d, "exp_avg"));
    s->exp_avg_sq(tensor_of(d, "exp_avg_sq"));
    s->max_exp_avg_sq(tensor_of(d, "max_exp_avg_sq"));
    return s;
  }

  torch::optim::Optimizer& optimizer_;
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
std::shared_ptr<Stateful> rng_states() { return std::make_shared<RngStates>(); }

}  // namespace handlers
}  // namespace kindling
