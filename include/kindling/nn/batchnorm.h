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

class KINDLING_API BatchNorm2dImpl : public torch::nn::Cloneable<BatchNorm2dImpl> {
 public:
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(torch::nn::BatchNormOptions(num_features)) {}
  explicit BatchNorm2dImpl(const torch::nn::BatchNormOptions& options);

  void reset() override;
  void reset_running_stats();
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  /// Input [N, C, H, W]. In training mode with synchronisation on and more than one rank in
  /// the group, the batch statistics are those of the whole group's batch.
  at::Tensor forward(const at::Tensor& input);

  /// Turns synchronisation on (over `group`, default the world) or off.
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
/// synchronised: finding one is an error naming it.
KINDLING_API int convert_sync_batchnorm(torch::nn::Module& module, dist::Group group = dist::Group());

}  // namespace nn
}  // namespace kindling
