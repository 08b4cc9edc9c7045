#pragma once
/// \file
/// Data-parallel training that communicates every H steps instead of every step: periodic model
/// averaging (local SGD, torch's PostLocalSGDOptimizer with its model averager), DiLoCo (Douillard
/// et al. 2023: an outer optimizer on the averaged change of the weights) and streaming DiLoCo
/// (2025: the model in fragments synchronised at staggered steps, each exchange overlapped with
/// the next inner steps, optionally in 16 bits).
///
/// \code
///   auto net = Net();
///   torch::optim::AdamW inner(net->parameters(), torch::optim::AdamWOptions(4e-4));
///   kindling::nn::DiLoCo optimizer(*net, inner, kindling::nn::DiLoCoOptions().sync_every(100));
///   // no DDP: train as usual with `optimizer` (zero_grad, forward, backward, step)
///
///   // with synchronous warm-up steps, or per host (DDP inside a host, DiLoCo between hosts):
///   auto model = kindling::dist::auto_model(net, kindling::nn::DdpOptions()
///       .comm_hook(optimizer.comm_hook()).broadcast_buffers(false));
/// \endcode
///
/// The algorithm, for each worker (a rank; a host with per_host): the inner optimizer steps the
/// weights θ on the worker's own batches. After every H inner steps (sync_every) the workers
/// average their pseudo-gradient Δ = θ_global − θ (θ_global: the weights all agreed on at the
/// last synchronisation, kept by this optimizer), the outer optimizer steps θ_global with Δ as
/// its gradient, and every worker carries on from the new θ_global. The outer optimizer SGD(lr 1,
/// no momentum) makes the new θ_global the workers' average: local SGD
/// (DiLoCoOptions::local_sgd). The default is the paper's Nesterov SGD(lr 0.7, momentum 0.9).
///
/// Streaming (fragments(F) > 1): the parameters, in the module's order, are cut into F runs of
/// about equal size (each ends at the parameter boundary nearest its share of the elements);
/// piece p is synchronised once every H steps, at local step (p+1)·H/F (integer division,
/// modulo H) of each period, so one F-th of the model crosses the link at a time. With
/// fragment_sync_delay(τ) the exchange of a piece starts after one inner step and is applied
/// after the τ-th next one (the inner steps meanwhile go on with the piece's local weights),
/// and the piece's weights become α·θ + (1 − α)·θ_global (fragment_update_alpha(α), default 0).
/// exchange_dtype(kBFloat16 or kHalf) sends the pseudo-gradient in 16 bits (half the bytes);
/// with error_feedback(true) each worker keeps what the cast lost and adds it to the piece's next
/// pseudo-gradient.
///
/// Floating-point buffers (BatchNorm's running statistics) are averaged over the workers with the
/// last piece; integer buffers stay each worker's own. Give DDP broadcast_buffers(false) under
/// DiLoCo, or it broadcasts them at every forward.
///
/// Warm-up and hosts need the DDP model to use comm_hook(): during the first warmup_steps the
/// hook averages the gradients over the DDP group at every step (torch's post_localSGD_hook); after
/// them it averages them inside the host only (per_host) or not at all, so the ranks step
/// independently. Without warm-up and per_host, no DDP model is needed.
///
/// Checkpoints: state_dict() holds θ_global, the outer optimizer's state, the step count (the
/// pieces' schedule follows from it) and every worker's own weights, inner optimizer state and
/// kept cast error (all gathered: the file holds the model once per worker), so a run resumes
/// exactly. At another world size each rank carries on as the saved rank (rank mod the saved
/// world size) did. Give handlers::stateful(optimizer) after the model in the objects saved:
/// loading it writes this rank's own weights into the module.
///
/// Memory: θ_global and the outer optimizer's state (SGD with momentum: one buffer) cost two
/// copies of the parameters beside the inner optimizer's.

#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/nn/comm_hook.h"
#include "kindling/nn/optimizer_state.h"

namespace kindling {
namespace nn {

/// DiLoCo's settings (see the file comment). Checked by DiLoCo's constructor.
class KINDLING_API DiLoCoOptions {
 public:
  DiLoCoOptions();
  DiLoCoOptions(const DiLoCoOptions& other);
  DiLoCoOptions& operator=(const DiLoCoOptions& other);
  ~DiLoCoOptions();

  /// Periodic model averaging every `every` steps (local SGD): the outer optimizer SGD(lr 1), no
  /// momentum. Does not throw.
  static DiLoCoOptions local_sgd(int64_t every);

  /// Inner steps between two synchronisations of each piece (H, >= 1; default 100).
  DiLoCoOptions& sync_every(int64_t steps);
  int64_t sync_every() const { return sync_every_; }
  /// Synchronous steps first: the DDP model's gradients averaged at each (>= 0; default 0).
  DiLoCoOptions& warmup_steps(int64_t steps);
  int64_t warmup_steps() const { return warmup_steps_; }
  /// The outer optimizer: torch::optim::SGDOptions, AdamOptions or AdamWOptions (default
  /// SGDOptions(0.7).momentum(0.9).nesterov(true), the paper's).
  DiLoCoOptions& outer(const torch::optim::OptimizerOptions& options);
  const torch::optim::OptimizerOptions& outer() const { return *outer_; }
  /// Pieces of the model synchronised at staggered steps (1..sync_every; default 1).
  DiLoCoOptions& fragments(int64_t count);
  int64_t fragments() const { return fragments_; }
  /// Inner steps a piece's exchange overlaps (0 <= τ < sync_every; default 0): pieces may be in
  /// flight together, each ends before its own next exchange.
  DiLoCoOptions& fragment_sync_delay(int64_t steps);
  int64_t fragment_sync_delay() const { return fragment_sync_delay_; }
  /// Weight of the worker's own weights when a piece's new global weights arrive (0..1; default 0).
  DiLoCoOptions& fragment_update_alpha(double alpha);
  double fragment_update_alpha() const { return fragment_update_alpha_; }
  /// The pseudo-gradient's type on the wire: at::kFloat (default), at::kBFloat16 or at::kHalf.
  DiLoCoOptions& exchange_dtype(c10::ScalarType dtype);
  c10::ScalarType exchange_dtype() const { return exchange_dtype_; }
  /// Keep what the cast to exchange_dtype lost and add it to the next exchange (default false).
  DiLoCoOptions& error_feedback(bool on);
  bool error_feedback() const { return error_feedback_; }
  /// The workers are hosts (DDP inside each host through comm_hook(), DiLoCo between them)
  /// rather than ranks (default false). A host's pseudo-gradient counts by its number of ranks.
  DiLoCoOptions& per_host(bool on);
  bool per_host() const { return per_host_; }

 private:
  int64_t sync_every_ = 100;
  int64_t warmup_steps_ = 0;
  std::unique_ptr<torch::optim::OptimizerOptions> outer_;
  int64_t fragments_ = 1;
  int64_t fragment_sync_delay_ = 0;
  double fragment_update_alpha_ = 0;
  c10::ScalarType exchange_dtype_ = c10::ScalarType::Float;
  bool error_feedback_ = false;
  bool per_host_ = false;
};

/// The optimizer of the file comment. Its param_groups() are the inner optimizer's (copied at
/// construction and given back to it at each step: schedule this optimizer's learning rate, not
/// the inner one's); its state() stays empty.
class KINDLING_API DiLoCo : public torch::optim::Optimizer, public SelfStatedOptimizer {
 public:
  /// Wraps `inner` (any LibTorch optimizer over `module`'s parameters, or some of them; both must
  /// outlive this object). Collective over the world: every rank calls it, in the same order (it
  /// broadcasts the module's parameters and buffers from rank 0, and with per_host makes a group
  /// per host). Throws kindling::UsageError for settings out of range (named, with the value), an
  /// outer optimizer of another kind than SGD/Adam/AdamW, an inner optimizer without parameters,
  /// or a parameter of `inner` that is not `module`'s; what the collectives throw.
  DiLoCo(torch::nn::Module& module, torch::optim::Optimizer& inner, const DiLoCoOptions& options = DiLoCoOptions());
  ~DiLoCo() override;

  /// The comm hook for the DDP model (DdpOptions::comm_hook), needed for warmup_steps and
  /// per_host (see the file comment). Give one DDP model one hook. Local; does not throw.
  std::shared_ptr<CommHook> comm_hook();

  /// Runs the inner optimizer's step (the closure with it), then the synchronisations due after
  /// this step: each piece's exchange started, or finished and applied. Every rank calls it the
  /// same number of times (the exchanges are collectives). Returns the closure's loss. Throws
  /// kindling::UsageError when the inner optimizer's learning rate was changed behind this one;
  /// what the inner optimizer and the collectives throw.
  at::Tensor step(LossClosure closure = nullptr) override;

  /// Averages every piece now (after training, before evaluating or saving the common model):
  /// exchanges in flight are finished, then each piece is exchanged and applied at once, as at
  /// its own step. The pieces' schedule goes on from the step count. Every rank calls it (a
  /// collective). Throws what the collectives throw.
  void synchronize();

  /// Inner steps taken (warm-up included). Local; does not throw.
  int64_t steps() const;
  /// Synchronisations applied so far, pieces counted one by one. Local; does not throw.
  int64_t synchronizations() const;

  /// The whole state (see the file comment): collective over the world, every rank calls it
  /// (exchanges in flight are finished first and kept as pending). Throws what the collectives
  /// throw.
  StateDict state_dict() const override;
  /// Restores a state_dict() on every rank (local): the global weights, the outer and inner
  /// optimizers' states, this rank's own weights written into the module. Throws
  /// kindling::UsageError, before changing anything, when it comes from other settings or
  /// another model (what differs, named).
  void load_state_dict(const StateDict& state) override;

  /// LibTorch's archives: both throw kindling::UsageError pointing to state_dict() /
  /// load_state_dict() (kindling::handlers::stateful uses those).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace nn
}  // namespace kindling
