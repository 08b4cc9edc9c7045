#pragma once
/// \file
/// kindling's DistributedDataParallel for LibTorch modules, and auto_model / auto_optim
/// (idist's names). Include <kindling/nn/ddp.h>; it is not part of <kindling/kindling.h>
/// because it pulls in LibTorch's nn headers.
///
/// \code
///   auto model = kindling::dist::auto_model(Net());          // DDP when distributed
///   torch::optim::SGD optimizer(model->parameters(), 0.01);
///   for (auto& batch : loader) {
///     optimizer.zero_grad();
///     auto loss = torch::nll_loss(model.forward(batch.data), batch.target);
///     loss.backward();            // gradients are averaged over ranks when this returns
///     optimizer.step();
///   }
/// \endcode
///
/// How it works (like PyTorch's DDP): gradients are grouped into buckets (reverse
/// registration order, a small first bucket, then `bucket_cap_mb`); a hook on each
/// parameter's gradient accumulator copies the gradient into its bucket, and when a
/// bucket is complete its all-reduce starts asynchronously while backward goes on. At the
/// end of backward (an autograd-engine callback) every bucket is waited on, divided by the
/// world size and copied back into the `.grad()` tensors, so `backward()` returns with
/// averaged gradients. Buckets are launched in index order on every rank, so the
/// all-reduces match even when gradients become ready in a different order.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/export.h"

namespace kindling {
namespace nn {

/// Options of auto_model / DistributedDataParallel. Chain the setters.
struct KINDLING_API DdpOptions {
  /// Bucket size in MiB (default 25, as PyTorch). The first bucket is capped at 1 MiB so
  /// that communication starts early in backward.
  DdpOptions& bucket_cap_mb(double v) { bucket_cap_mb_ = v; return *this; }
  /// Allow parameters that get no gradient in an iteration (PyTorch's
  /// find_unused_parameters). Costs one extra small all-reduce per iteration. Without it,
  /// a parameter that gets no gradient is an error naming it.
  DdpOptions& find_unused_parameters(bool v) { find_unused_parameters_ = v; return *this; }
  /// Broadcast buffers (BatchNorm statistics...) from rank 0 before each forward (default true).
  DdpOptions& broadcast_buffers(bool v) { broadcast_buffers_ = v; return *this; }
  /// The group whose ranks train together (default: the world).
  DdpOptions& group(dist::Group v) { group_ = std::move(v); return *this; }
  /// idist's sync_bn: in a distributed run, switch every kindling::nn::BatchNorm2d of the
  /// model to batch statistics over the group (convert_sync_batchnorm, which also says
  /// why torch::nn::BatchNorm layers are refused). Default false.
  DdpOptions& sync_batchnorm(bool v) { sync_batchnorm_ = v; return *this; }

  double bucket_cap_mb() const { return bucket_cap_mb_; }
  bool find_unused_parameters() const { return find_unused_parameters_; }
  bool broadcast_buffers() const { return broadcast_buffers_; }
  const dist::Group& group() const { return group_; }
  bool sync_batchnorm() const { return sync_batchnorm_; }

 private:
  double bucket_cap_mb_ = 25.0;
  bool find_unused_parameters_ = false;
  bool broadcast_buffers_ = true;
  bool sync_batchnorm_ = false;
  dist::Group group_;
};

/// The gradient synchronisation engine of DistributedDataParallel, for any list of
/// parameters. Constructing it broadcasts parameters and buffers from the group's first
/// rank and installs the hooks; destroying it removes them. Every rank of the group must
/// construct it with the same parameters (checked).
class KINDLING_API GradientReducer {
 public:
  GradientReducer(const torch::nn::Module& module, DdpOptions options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Called before each forward: broadcasts the buffers from the source rank when
  /// broadcast_buffers is on, gradients are enabled and sync is on (as torch's DDP; a
  /// no-grad or no_sync forward does not communicate). All ranks of the group call it
  /// together in that case.
  void before_forward();
  /// While false (see no_sync()), backward accumulates gradients locally without
  /// communication; the next synchronised backward averages the accumulated gradients.
  void set_sync(bool enabled);
  bool sync_enabled() const;
  /// Number of buckets, and the parameter names in each (for tests and tuning).
  std::vector<std::vector<std::string>> buckets() const;
  /// Backward passes that ended with averaged gradients.
  int64_t synchronized_backwards() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

/// RAII: disables gradient synchronisation for its lifetime (gradient accumulation).
class KINDLING_API NoSyncGuard {
 public:
  explicit NoSyncGuard(GradientReducer* reducer);
  ~NoSyncGuard();
  NoSyncGuard(NoSyncGuard&& other) noexcept : reducer_(other.reducer_), previous_(other.previous_) { other.reducer_ = nullptr; }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  GradientReducer* reducer_;
  bool previous_ = true;
};

/// A module of type M with data-parallel gradient synchronisation. Use it like the module:
/// `ddp->parameters()`, `ddp.forward(x)` (or `ddp(x)`), `ddp->train()`. In the serial
/// model it holds no reducer and is a plain pass-through.
template <class M>
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<M> module, std::shared_ptr<GradientReducer> reducer)
      : module_(std::move(module)), reducer_(std::move(reducer)) {}

  M* operator->() const { return module_.get(); }
  M& operator*() const { return *module_; }
  const std::shared_ptr<M>& module() const { return module_; }
  /// Null in the serial model.
  GradientReducer* reducer() const { return reducer_.get(); }

  template <class... Args>
  decltype(auto) forward(Args&&... args) {
    if (reducer_) reducer_->before_forward();
    return module_->forward(std::forward<Args>(args)...);
  }
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  /// Gradient accumulation: `{ auto guard = ddp.no_sync(); loss.backward(); }`.
  NoSyncGuard no_sync() { return NoSyncGuard(reducer_.get()); }

 private:
  std::shared_ptr<M> module_;
  std::shared_ptr<GradientReducer> reducer_;
};

}  // namespace nn

namespace dist {
namespace detail {
/// Moves `module` to device() and, in a distributed model with more than one rank in the
/// group, returns its reducer (else null).
KINDLING_API std::shared_ptr<nn::GradientReducer> prepare_model(torch::nn::Module& module, const nn::DdpOptions& options);
}  // namespace detail

/// idist.auto_model: places the module on device() and, when distributed, wraps it in
/// kindling's DistributedDataParallel (parameters and buffers broadcast from rank 0).
template <class M>
nn::DistributedDataParallel<M> auto_model(std::shared_ptr<M> module, const nn::DdpOptions& options = nn::DdpOptions()) {
  auto reducer = detail::prepare_model(*module, options);
  return nn::DistributedDataParallel<M>(std::move(module), std::move(reducer));
}
/// The same for a module holder (the usual `Net model;` of TORCH_MODULE).
template <class M>
nn::DistributedDataParallel<M> auto_model(const torch::nn::ModuleHolder<M>& holder,
                                          const nn::DdpOptions& options = nn::DdpOptions()) {
  return auto_model(holder.ptr(), options);
}

/// idist.auto_optim: with the serial, gloo, mpi and nccl backends the optimizer needs no
/// change (gradients are already averaged by DistributedDataParallel), so it is returned
/// as is; the function exists so that code written for idist reads the same.
template <class Optimizer>
Optimizer& auto_optim(Optimizer& optimizer) {
  return optimizer;
}

}  // namespace dist
}  // namespace kindling
