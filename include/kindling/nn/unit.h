#pragma once
/// \file
/// A unit of sharding (kindling/nn/sharding.h): a submodule whose parameters are gathered
/// together just before it computes and freed again after, forward and backward. LibTorch
/// modules have no forward hooks, so a unit is a module the model calls through kindling: put
/// `kindling::nn::Unit` around a submodule where the model registers it.
///
/// \code
///   struct NetImpl : torch::nn::Module {
///     NetImpl() {
///       block1 = register_module("block1", kindling::nn::Unit<BlockImpl>(Block()));
///       block2 = register_module("block2", kindling::nn::Unit<BlockImpl>(Block()));
///     }
///     torch::Tensor forward(torch::Tensor x) { return block2(block1(x)); }
///     kindling::nn::Unit<BlockImpl> block1{nullptr}, block2{nullptr};
///   };
/// \endcode
///
/// A Unit registers the wrapped module's parameters, buffers and children as its own, so the
/// names stay those of the model without it ("block1.fc.weight", not "block1.module.fc.weight")
/// and checkpoints load in a model built without units. Outside a sharded model (serial, DDP)
/// a Unit only calls the module's forward.

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstddef>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace nn {

namespace detail {
/// What a sharded model does around one of its units' forward (src/nn/sharding/). Called on
/// the forward's thread.
class KINDLING_API UnitCalls {
 public:
  virtual ~UnitCalls();
  /// Before unit `index` computes: its parameters are gathered when this returns (a
  /// collective over the sharding group; every rank enters its units in the same order).
  virtual void enter(std::size_t index) = 0;
  /// After it computed `outputs` (the tensors it returned): hooks its backward and frees its
  /// parameters when the options say so. Throws what the collectives throw.
  virtual void leave(std::size_t index, const std::vector<at::Tensor>& outputs) = 0;
};

/// The tensors of a unit's result: a tensor, a vector of tensors or a tuple of them (other
/// values in a tuple are skipped).
inline void output_tensors(const at::Tensor& t, std::vector<at::Tensor>& out) { out.push_back(t); }
inline void output_tensors(const std::vector<at::Tensor>& ts, std::vector<at::Tensor>& out) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <class T>
void output_tensors(const T&, std::vector<at::Tensor>&) {}
template <class... T>
void output_tensors(const std::tuple<T...>& t, std::vector<at::Tensor>& out) {
  std::apply([&out](const auto&... e) { (output_tensors(e, out), ...); }, t);
}
}  // namespace detail

/// The part of every Unit that the sharded model finds (by this type, in the module tree) and
/// binds. Users do not call it.
class KINDLING_API UnitBase {
 public:
  virtual ~UnitBase();
  /// Binds this unit to a sharded model as its unit `index` (a null `calls` unbinds). Called
  /// by the sharded model's construction; local, does not throw.
  void bind(std::weak_ptr<detail::UnitCalls> calls, std::size_t index);
  /// The sharded model this unit is bound to now (null when none). Local; does not throw.
  std::shared_ptr<detail::UnitCalls> bound() const { return calls_.lock(); }
  /// Its index in that model. Local; does not throw.
  std::size_t index() const { return index_; }

 private:
  std::weak_ptr<detail::UnitCalls> calls_;
  std::size_t index_ = 0;
};

/// The unit module around a module of type M (see the file comment).
template <class M>
class UnitImpl : public torch::nn::Cloneable<UnitImpl<M>>, public UnitBase {
 public:
  /// Wraps `module`: its parameters, buffers and children become this module's, under their own
  /// names. Local; does not throw.
  explicit UnitImpl(const torch::nn::ModuleHolder<M>& module) : UnitImpl(module.ptr()) {}
  /// The same for a module pointer.
  explicit UnitImpl(std::shared_ptr<M> module) : module_(std::move(module)) { adopt(); }
  /// Cloneable's rebuild (clone()): a clone of the wrapped module (M must be cloneable, as
  /// LibTorch's own modules are), adopted as the constructor does, bound to no sharded model.
  void reset() override {
    bind({}, 0);
    module_ = std::dynamic_pointer_cast<M>(module_->clone());
    adopt();
  }
  /// The wrapped module.
  const std::shared_ptr<M>& module() const { return module_; }
  /// The wrapped module's forward; in a sharded model with its parameters gathered around it
  /// (collectives over the sharding group: every rank calls its units in the same order).
  /// Throws what the module's forward and the collectives throw.
  template <class... Args>
  decltype(auto) forward(Args&&... args) {
    auto calls = bound();
    if (!calls) return module_->forward(std::forward<Args>(args)...);
    calls->enter(index());
    decltype(auto) result = module_->forward(std::forward<Args>(args)...);
    std::vector<at::Tensor> outputs;
    detail::output_tensors(result, outputs);
    calls->leave(index(), outputs);
    return result;
  }
  /// Sets training mode here and on the wrapped module (whose own flag its forward may read).
  void train(bool on = true) override {
    torch::nn::Module::train(on);
    module_->train(on);
  }

 private:
  void adopt() {
    for (const auto& p : module_->named_parameters(/*recurse=*/false))
      this->register_parameter(p.key(), p.value(), p.value().requires_grad());
    for (const auto& b : module_->named_buffers(/*recurse=*/false)) this->register_buffer(b.key(), b.value());
    for (const auto& c : module_->named_children()) this->register_module(c.key(), c.value());
  }

  std::shared_ptr<M> module_;
};

/// The module holder of UnitImpl<M> (as TORCH_MODULE makes for a module): `Unit<BlockImpl>(Block())`.
template <class M>
class Unit : public torch::nn::ModuleHolder<UnitImpl<M>> {
 public:
  /// `Unit<M>(holder)`, `Unit<M>(pointer)` (UnitImpl's constructors) and `Unit<M>(nullptr)`.
  using torch::nn::ModuleHolder<UnitImpl<M>>::ModuleHolder;
  /// `unit(x)`: UnitImpl::forward (ModuleHolder's own cannot see a forward that is a template).
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return this->get()->forward(std::forward<Args>(args)...);
  }
};

}  // namespace nn
}  // namespace kindling
