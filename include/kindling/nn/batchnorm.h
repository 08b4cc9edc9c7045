#pragma once
/// \file
/// kindling::nn::BatchNorm2d: torch::nn::BatchNorm2d's drop-in twin (same options, same
/// parameter and buffer names, same numerics) that can be switched to synchronized batch
/// statistics across the ranks of a group (PyTorch's SyncBatchNorm).
///
/// Why a twin and not a converter of torch::nn::BatchNorm2d: C++ modules call their
/// children through member fields, so a converter that swaps registered children cannot
/// reach the calls a parent's forward() makes. Build models with kindling::nn::BatchNorm2d
/// and turn synchronisation on with convert_sync_batchnorm() or
/// auto_model(..., DdpOptions().sync_batchnorm(true)).

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <optional>

#include "kindling/dist/group.h"
#include "kindling/export.h"

namespace kindling {
namespace nn {

/// Batch normalisation over [N, C, H, W] inputs. Synchronisation is off after construction;
/// construction, reset*(), set_sync() and sync() are local and do not communicate.
class KINDLING_API BatchNorm2dImpl : public torch::nn::Cloneable<BatchNorm2dImpl> {
 public:
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(torch::nn::BatchNormOptions(num_features)) {}
  /// Registers weight, bias, running_mean, running_var and num_batches_tracked as
  /// torch::nn::BatchNorm2d does. Nothing of its own to throw.
  explicit BatchNorm2dImpl(const torch::nn::BatchNormOptions& options);

  /// Registers and initialises the parameters and buffers; the constructor and clone() call
  /// it (on a module that still has them LibTorch throws c10::Error). Keeps the sync setting.
  void reset() override;
  /// running_mean 0, running_var 1, num_batches_tracked 0 (when tracking running stats).
  void reset_running_stats();
  /// reset_running_stats(), then weight 1 and bias 0 (when affine).
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  /// Input [N, C, H, W]. In training mode with synchronisation on and more than one rank in
  /// the group, the batch statistics are those of the whole group's batch.
  /// It synchronises when sync() is on, batch statistics are used (training mode, or
  /// track_running_stats off), kindling::dist is initialized, the group has more than one
  /// rank and this rank is in it. Then every rank of the group must call it, in the same
  /// order (and run backward, which all-reduces the gradient sums); it all-gathers the
  /// statistics and can throw kindling::TimeoutError / kindling::CommunicationError.
  /// Throws kindling::UsageError for an input that is not 4-D or has another channel count
  /// (checked before communicating, so the other ranks are left waiting), and, synchronised,
  /// when the whole group's batch has at most 1 value per channel.
  at::Tensor forward(const at::Tensor& input);

  /// Turns synchronisation on (over `group`, default the world) or off. Local; does not throw.
  void set_sync(bool enabled, dist::Group group = dist::Group());
  bool sync() const { return sync_; }

  torch::nn::BatchNormOptions options;
  at::Tensor weight;
  at::Tensor bias;
  at::Tensor running_mean;
  at::Tensor running_var;
  at::Tensor num_batches_tracked;

 private:
  bool sync_ = false;
  dist::Group group_;
};
TORCH_MODULE(BatchNorm2d);

/// Turns synchronisation on in every kindling::nn::BatchNorm2d of `module` (recursively)
/// and returns how many there were. torch::nn::BatchNorm{1,2,3}d layers cannot be
/// synchronised: finding one is an error naming it (kindling::UsageError, thrown after the
/// kindling::nn::BatchNorm2d layers have already been switched on). Any rank; local, no
/// communication (the forward passes communicate afterwards).
KINDLING_API int convert_sync_batchnorm(torch::nn::Module& module, dist::Group group = dist::Group());

}  // namespace nn
}  // namespace kindling
