#pragma once
/// \file
/// Sharded data-parallel training (ZeRO-2 and ZeRO-3, as torch's fully_shard): each rank of the
/// group holds 1/N of the parameters, of their gradients and of the optimizer's state.
///
/// \code
///   auto model = kindling::dist::auto_model(Net(), kindling::nn::ShardingOptions());
///   torch::optim::Adam optimizer(model.parameters(), 1e-3);   // this rank's shards
///   for (auto& batch : loader) {
///     optimizer.zero_grad();
///     torch::nll_loss(model(batch.data), batch.target).backward();
///     optimizer.step();
///   }
/// \endcode
///
/// Units: the model's parameters are split into units, each gathered as one. A unit is a
/// kindling::nn::Unit in the model (kindling/nn/unit.h), or, where the model is a
/// torch::nn::Sequential without Units, each of its children. Parameters in no unit form the root
/// unit, gathered when forward starts and kept until backward ends.
///
/// How it works: a unit's parameters (in registration order) lie end to end in one flat buffer,
/// padded to N equal chunks; rank r keeps chunk r (its shard) and the module's parameters are
/// views of the whole buffer while it is gathered. Before a unit computes, kindling::dist::
/// all_gather_into fills the buffer, the next unit's gather already in flight (the order learnt
/// from the previous forward); with reshard_after_forward (ZeRO-3) the buffer's memory is freed
/// after the unit's forward and gathered again when backward reaches the unit's outputs (the
/// gather of the unit backward meets next already started). As backward accumulates a unit's
/// last gradient, the unit's gradients start one kindling::dist::reduce_scatter_async (each
/// rank's gradients scaled by 1/N as they are copied in, as DDP does) and their full copies are
/// freed; at the end of backward each rank's shard of the average is added to its shards'
/// `.grad()`. Without reshard_after_forward (ZeRO-2) the parameters stay whole between
/// forward and backward, and the first forward after a synchronised backward (after which the
/// optimizer may have stepped) gathers every unit again, as does one after the shards were
/// changed in place. The optimizer, any LibTorch optimizer, is built on parameters():
/// for each of the module's parameters, the part of it in this rank's chunk (1-D, possibly
/// empty), so parameter groups and their options work as on the module. Since the optimizers'
/// arithmetic is elementwise (SGD, Adam and AdamW are tested; RMSprop and Adagrad too, not
/// tested), the training equals DDP's (bit for bit on 2 ranks; on more, the gradients' sum runs
/// in rank order).
///
/// Rules: every rank of the group builds the same model with the same units and options (checked
/// once: kindling::UsageError naming both ranks) and calls the units in the same order (not
/// checked: the gathers would pair up wrongly, as DDP's collectives would). A unit may compute
/// more than once in a forward (it is gathered for each call; autograd adds the calls' gradients
/// before they accumulate), but every parameter must get a gradient in every synchronised
/// backward (kindling::UsageError out of backward() naming those that did not). The module's
/// parameters are views kindling manages: changing them in place outside kindling is refused
/// at the next forward; build the optimizer on parameters(), not on the module's parameters
/// (whose gradients stay empty). Under ZeRO-3 the module's parameters are empty tensors
/// between steps; read the weights with full_parameters() or save the model (kindling::
/// handlers::stateful(model)). Destroying the sharded model leaves the module's parameters as
/// they are then where they are whole in their own dtype, and NaN of their shapes elsewhere
/// (under ZeRO-3, or gathered in param_dtype; one element, expanded: a destructor cannot gather,
/// which is a collective): keep the model while the module is used, or build a new sharded model
/// on the module and load a saved state into it (live recovery does so in each new world).

#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/nn/unit.h"
#include "kindling/options.h"

namespace kindling {
namespace nn {

/// Options of a sharded model (auto_model's second argument chooses sharding).
struct KINDLING_API ShardingOptions {
  /// Free each unit's gathered parameters after its forward and gather them again for its
  /// backward (ZeRO-3, torch's reshard_after_forward=True): the least memory, 1.5x DDP's bytes
  /// on the wire. false: ZeRO-2, the parameters stay whole, DDP's bytes. Default true.
  KINDLING_ARG(bool, reshard_after_forward) = true;
  /// Start the next unit's gather while this one computes (forward and backward). Default true.
  KINDLING_ARG(bool, prefetch) = true;
  /// Broadcast buffers (BatchNorm statistics...) from the group's first rank before each forward
  /// with gradients enabled, as DDP does. Default true.
  KINDLING_ARG(bool, broadcast_buffers) = true;
  /// The group whose ranks share the model (default: the world).
  KINDLING_ARG(dist::Group, group);
  /// Mixed precision: the dtype the gathered parameters compute in (e.g. at::kBFloat16), the
  /// shards and the optimizer staying in the parameters' own dtype (float32). Floating-point
  /// tensor arguments of forward are cast to it, a tensor result back to the shards' dtype.
  /// Unset (default): the parameters' dtype.
  KINDLING_ARG(std::optional<at::ScalarType>, param_dtype);
  /// The dtype the gradients are reduce-scattered in (unset, default: the shards' dtype; e.g.
  /// at::kBFloat16 halves the bytes of the reduction).
  KINDLING_ARG(std::optional<at::ScalarType>, reduce_dtype);
};

/// The engine of a sharded model: the units, their shards, the gathers and reductions. Built by
/// auto_model (or directly), used through FullyShardedDataParallel.
class KINDLING_API ShardedModel {
 public:
  /// Shards `module`'s parameters that require a gradient over options.group(). Its units are
  /// the Units in it, else, with `children_are_units`, its children (a Sequential's). A collective
  /// over the group: it checks that every rank has the same units, parameters and options,
  /// broadcasts parameters and buffers from the group's first rank, keeps this rank's shard.
  /// Throws kindling::UsageError for no parameter, a Unit inside another, a parameter registered in
  /// two units, ranks that differ (naming both); TimeoutError / CommunicationError from the
  /// collectives.
  ShardedModel(torch::nn::Module& module, ShardingOptions options, bool children_are_units);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  /// Before the module's forward: refuses parameters changed outside kindling (kindling::
  /// UsageError), broadcasts the buffers (when gradients are enabled), gathers the root unit and
  /// the units a ZeRO-2 forward needs again. A collective over the group.
  void before_forward();
  /// After the module's forward returned: ends the gathers it started for units it did not
  /// reach (a collective's wait). Throws TimeoutError / CommunicationError.
  void after_forward();
  /// After the module's forward threw. Local; does not throw.
  void forward_failed() noexcept;
  /// A forward argument as the model computes it: a floating-point tensor in param_dtype when
  /// one is set; else itself. Local.
  at::Tensor cast_input(const at::Tensor& input) const;
  /// A forward result as the caller gets it: in the shards' dtype when param_dtype is set. Local.
  at::Tensor cast_output(const at::Tensor& output) const;
  /// Sequential children as units (children_are_units): around child `index`'s forward.
  /// Collectives as UnitCalls' enter / leave.
  void enter_unit(std::size_t index);
  void leave_unit(std::size_t index, const std::vector<at::Tensor>& outputs);

  /// This rank's shards, one per parameter of the module (in its order): what the optimizer
  /// steps. Local; does not throw.
  std::vector<at::Tensor> parameters() const;
  /// The same with the module's parameter names.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  /// Every parameter whole (copies, in the module's order, with its names), gathered from the
  /// shards: a collective over the group (every rank calls it, every rank gets the whole).
  /// Throws TimeoutError / CommunicationError.
  std::vector<std::pair<std::string, at::Tensor>> full_parameters() const;
  /// Sets the parameters from whole tensors by the module's names (full_parameters()' layout: every
  /// parameter, its shape): this rank keeps its part, and the next forward gathers the new values.
  /// Local: every rank passes the same values. Throws kindling::UsageError naming a missing
  /// parameter or a wrong shape, before changing anything.
  void load_full_parameters(const std::vector<std::pair<std::string, at::Tensor>>& whole);
  /// The state of `optimizer` (built on parameters(); SGD, Adam or AdamW) in torch's layout with
  /// each per-parameter tensor whole in its parameter's shape: what the same optimizer over DDP's
  /// module saves, and what Python's torch.optim loads. A collective over the group (every rank
  /// gets the whole). Throws kindling::UsageError for an optimizer not built on parameters() or
  /// ranks whose states differ in entries; TimeoutError / CommunicationError.
  StateDict full_optimizer_state_dict(const torch::optim::Optimizer& optimizer) const;
  /// Restores a full_optimizer_state_dict() (or an ordinary optimizer's state in torch's layout),
  /// saved at any world size: this rank keeps its parts. Local. Throws kindling::UsageError as
  /// kindling::nn::load_optimizer_state_dict does, before changing anything.
  void load_full_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state);
  /// This rank's part of the model, and of `optimizer`'s state when given (built on
  /// parameters()), for a checkpoint whose files every rank writes at once (kindling::handlers::
  /// save_sharded writes it): {"format", "world", "rank", "parameters": {name: this rank's piece,
  /// 1-D}, "offsets": {name: where the piece starts in the flattened parameter}, "buffers": {name:
  /// tensor}, "optimizer": its state in torch's layout with each per-parameter tensor this rank's
  /// piece, "optimizer_parameters": the module's name of each of its parameters}. Python's
  /// torch.load reads such a file as nested dicts. Local; throws kindling::UsageError for an
  /// optimizer not built on parameters().
  StateDict local_state_dict(const torch::optim::Optimizer* optimizer = nullptr) const;
  /// Restores the local_state_dict() of every rank of one save made at any world size
  /// (`saved_world` ranks; `saved(k)` returns rank k's, called once for each k in order, so that
  /// one file at a time is in memory): this rank keeps each file's overlap with its pieces, the
  /// buffers come from rank 0's, the optimizer's state (when `optimizer` is given) from the pieces'
  /// overlaps and its options from rank 0's. Local (no communication; every rank reads the files
  /// it needs). Throws kindling::UsageError, before changing anything, for a state that is not a
  /// sharded model's, files out of order or from different saves, another model's parameters or
  /// buffers, pieces that do not cover this rank's, no optimizer state when `optimizer` is given
  /// (and what load_optimizer_state_dict refuses, before the optimizer changes). `before_change`,
  /// when given, is called once every file was read and checked, before anything changes
  /// (load_sharded makes the ranks agree there); what it throws leaves everything as it was.
  void load_local_state_dicts(const std::function<StateDict(int)>& saved, int64_t saved_world,
                              torch::optim::Optimizer* optimizer = nullptr,
                              const std::function<void()>& before_change = nullptr);
  /// The units' names ("" for the root unit), in the order of their shards. Local.
  std::vector<std::string> units() const;
  /// Elements of the parameters this rank keeps between steps: its shards (padding included),
  /// plus what stays gathered (the root unit under ZeRO-3, every unit under ZeRO-2). Local.
  int64_t resident_parameter_numel() const;
  /// Refuses (kindling::UsageError, naming the first one) an optimizer that holds a parameter of
  /// the module rather than its shard: built on module()->parameters() instead of parameters(),
  /// it would step nothing. Local. create_supervised_trainer calls it.
  void check_optimizer(const torch::optim::Optimizer& optimizer) const;
  /// The optimizer inside backward: from the next synchronised backward on, at its end, each
  /// unit's shards are stepped by `optimizer` as soon as that unit's reduction is in (its
  /// gradients alone: the other parameters' are kept out of that step), while the later units'
  /// reductions are still on the wire, and under ZeRO-2 the unit's gather for the next forward
  /// starts at once (under ZeRO-3 the root unit's). The shards' gradients are dropped once stepped,
  /// so the optimizer's own step() after backward changes nothing of them (and steps any other
  /// parameter it holds): training code and create_supervised_trainer stay as they are, LR
  /// schedulers work. The buffers are broadcast at the end of such a backward, ahead of the
  /// gathers, instead of at the next forward. Whatever changes gradients between backward and step() comes too late:
  /// clip_grad_norm is refused while it is on. Between backward and the next forward the
  /// module's parameters are being gathered (read them with full_parameters()). Null turns it
  /// off. `optimizer` is not owned: keep it alive while backward runs. Every rank calls it
  /// alike (not checked: the gathers would pair up wrongly). Local: calls optimizer.step() once
  /// with no gradient to see that it needs no closure. Throws kindling::UsageError for an
  /// optimizer check_optimizer refuses, or one that needs a closure (LBFGS).
  void step_in_backward(torch::optim::Optimizer* optimizer);
  /// The optimizer step_in_backward set; null when off. Local; does not throw.
  torch::optim::Optimizer* stepping_in_backward() const;
  /// The group whose ranks share the model (options().group()). Local; does not throw.
  const dist::Group& group() const;
  /// Scales the shards' gradients so that the norm of all the gradients together (over every
  /// rank's shards: one all_reduce) is at most `max_norm` (torch's clip_grad_norm_ on a sharded
  /// model); returns that norm before clipping. `norm_type` > 0 (2 by default; infinity: the
  /// largest magnitude). A collective over the group. Throws kindling::UsageError for
  /// max_norm < 0 or norm_type <= 0, or while step_in_backward is on; TimeoutError /
  /// CommunicationError.
  double clip_grad_norm(double max_norm, double norm_type = 2.0);
  /// The largest number of elements that were gathered at once (the units' whole buffers held
  /// at the same moment), since construction or the last reset: with reshard_after_forward, the
  /// root unit plus at most two units (one computing, the next prefetched). Local.
  int64_t peak_gathered_numel() const;
  /// The largest number of elements of whole gradients alive at once in a synchronised backward
  /// (since construction or the last reset): a unit's gradients lie whole in its flat buffer from
  /// its first one until its reduction is in; with reshard_after_forward backward waits for one
  /// unit's reduction when the next starts, so at most two units' (one reducing, the next
  /// accumulating); without (ZeRO-2) it does not wait, up to every unit's. Local.
  int64_t peak_whole_gradient_numel() const;
  /// Restarts both peaks (from what is gathered now, and from none). Local; does not throw.
  void reset_peaks();
  /// Gradient accumulation: while false, backward keeps the full gradients locally (no
  /// communication); the next synchronised backward reduces what they summed. Local.
  void set_sync(bool enabled);
  /// Whether backward synchronises now. Local; does not throw.
  bool sync_enabled() const;

  /// clip_grad_norm's arithmetic on `params`' gradients of this process alone (the serial
  /// model's). Local; throws kindling::UsageError as clip_grad_norm does.
  static double clip_local_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

namespace detail {
/// 1 for a parameter of a module a live sharded model manages, 2 for one of its shards, else 0
/// (checkpoints' stateful() refuses to save those as a plain module or optimizer). Local.
KINDLING_API int sharded_role(const at::Tensor& tensor);
/// The live sharded model whose shard `tensor` is (a parameter of an optimizer built on its
/// parameters()), null for any other tensor: what must decide alike over the model's ranks
/// (GradScaler's overflow check) asks it for the group and whether the model steps inside
/// backward. Valid while the model lives. Local; does not throw.
KINDLING_API const ShardedModel* shard_owner(const at::Tensor& tensor);
}  // namespace detail

/// RAII: no synchronisation for its lifetime (ShardedModel::set_sync(false)). Local.
class KINDLING_API ShardingNoSync {
 public:
  /// A null `model` (the serial model) makes a guard that does nothing.
  explicit ShardingNoSync(ShardedModel* model);
  ~ShardingNoSync();
  ShardingNoSync(ShardingNoSync&& other) noexcept : model_(other.model_), previous_(other.previous_) {
    other.model_ = nullptr;
  }
  ShardingNoSync(const ShardingNoSync&) = delete;
  ShardingNoSync& operator=(const ShardingNoSync&) = delete;

 private:
  ShardedModel* model_;
  bool previous_ = true;
};

/// A module of type M trained sharded (the file comment). In the serial model it holds no
/// engine and is a pass-through whose parameters() are the module's.
template <class M>
class FullyShardedDataParallel {
 public:
  /// Wraps `module` and its engine (null: serial). Local; build both with auto_model.
  FullyShardedDataParallel(std::shared_ptr<M> module, std::shared_ptr<ShardedModel> sharded)
      : module_(std::move(module)), sharded_(std::move(sharded)) {}

  /// The module (train(), eval(), its submodules). Its parameters are views kindling manages:
  /// optimise parameters() instead.
  const std::shared_ptr<M>& module() const { return module_; }
  M* operator->() const { return module_.get(); }
  M& operator*() const { return *module_; }
  /// The engine; null in the serial model.
  ShardedModel* sharded() const { return sharded_.get(); }
  /// What the optimizer steps: this rank's shards (the module's parameters in the serial model).
  std::vector<at::Tensor> parameters() const { return sharded_ ? sharded_->parameters() : module_->parameters(); }
  /// The same with the module's parameter names.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const {
    if (sharded_) return sharded_->named_parameters();
    std::vector<std::pair<std::string, at::Tensor>> all;
    for (const auto& p : module_->named_parameters()) all.emplace_back(p.key(), p.value());
    return all;
  }

  /// The module's forward with the units' parameters gathered around them: collectives over
  /// the group (every rank, in the same order). Throws what those and the module throw.
  template <class... Args>
  decltype(auto) forward(Args&&... args) {
    if (!sharded_) return module_->forward(std::forward<Args>(args)...);
    sharded_->before_forward();
    struct Failed {
      ShardedModel* model;
      ~Failed() {
        if (model) model->forward_failed();
      }
    } failed{sharded_.get()};
    decltype(auto) result = run(cast_in(std::forward<Args>(args))...);
    failed.model = nullptr;
    sharded_->after_forward();
    if constexpr (std::is_same<std::decay_t<decltype(result)>, at::Tensor>::value) {
      return sharded_->cast_output(result);
    } else {
      return result;
    }
  }
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  /// ShardedModel::check_optimizer (nothing in the serial model).
  void check_optimizer(const torch::optim::Optimizer& optimizer) const {
    if (sharded_) sharded_->check_optimizer(optimizer);
  }
  /// ShardedModel::step_in_backward(&optimizer) (nothing in the serial model, where
  /// optimizer.step() steps as usual).
  void step_in_backward(torch::optim::Optimizer& optimizer) {
    if (sharded_) sharded_->step_in_backward(&optimizer);
  }
  /// ShardedModel::clip_grad_norm; in the serial model torch::nn::utils::clip_grad_norm_'s
  /// arithmetic on the module's gradients (kindling's, so that both read alike).
  double clip_grad_norm(double max_norm, double norm_type = 2.0) {
    return sharded_ ? sharded_->clip_grad_norm(max_norm, norm_type)
                    : ShardedModel::clip_local_grad_norm(module_->parameters(), max_norm, norm_type);
  }
  /// Gradient accumulation without communication: `{ auto guard = model.no_sync(); loss.backward(); }`.
  ShardingNoSync no_sync() { return ShardingNoSync(sharded_.get()); }

 private:
  template <class T>
  decltype(auto) cast_in(T&& arg) {
    if constexpr (std::is_same<std::decay_t<T>, at::Tensor>::value) {
      return sharded_->cast_input(arg);
    } else {
      return std::forward<T>(arg);
    }
  }
  template <class... Args>
  decltype(auto) run(Args&&... args) {
    if constexpr (std::is_base_of<torch::nn::SequentialImpl, M>::value) {
      // A Sequential's children are its units: the loop is Sequential::forward's, with them around.
      at::Tensor x(std::forward<Args>(args)...);
      std::size_t i = 0;
      for (auto& child : *module_) {
        sharded_->enter_unit(i);
        x = child.template forward<at::Tensor>(x);
        sharded_->leave_unit(i++, {x});
      }
      return x;
    } else {
      return module_->forward(std::forward<Args>(args)...);
    }
  }

  std::shared_ptr<M> module_;
  std::shared_ptr<ShardedModel> sharded_;
};

}  // namespace nn
}  // namespace kindling
