#pragma once
/// \file
/// ResNet-18/34/50 for LibTorch, architecturally identical to torchvision's
/// (torchvision.models.resnet18/34/50, "ResNet v1.5": in a Bottleneck the stride is on the
/// 3x3 convolution), with the same parameter and buffer names in named_parameters() /
/// named_buffers() as torchvision's state_dict() (conv1.weight, bn1.running_mean,
/// layer1.0.conv1.weight, layer2.0.downsample.0.weight, layer2.0.downsample.1.weight,
/// fc.bias, ...), and torchvision's initialisation (kaiming_normal_(fan_out, relu) for the
/// convolutions, BatchNorm weight 1 and bias 0, the default Linear initialisation for fc).
///
/// Every BatchNorm layer is a kindling::nn::BatchNorm2d, so synchronized batch
/// normalisation can be switched on with kindling::nn::convert_sync_batchnorm(*model).
/// Building a model never communicates; forward() communicates only through synchronized
/// BatchNorm layers (see ResNetImpl::forward).
///
/// \code
///   auto model = kindling::models::resnet18(kindling::models::ResNetOptions().num_classes(10));
///   auto logits = model->forward(torch::randn({8, 3, 224, 224}));   // [8, 10]
/// \endcode

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <ostream>
#include <vector>

#include "kindling/export.h"
#include "kindling/options.h"
#include "kindling/nn/batchnorm.h"
#include "kindling/nn/unit.h"

namespace kindling {
namespace models {

/// Options of the ResNet models. Chain the setters. The defaults give torchvision's model.
/// Setters and getters do not check or throw; the ResNet constructor checks the values.
struct KINDLING_API ResNetOptions {
  /// Outputs of the final fully connected layer (default 1000).
  KINDLING_ARG(int64_t, num_classes) = 1000;

  /// Channels of the input images (default 3); only conv1 changes.
  KINDLING_ARG(int64_t, in_channels) = 3;

  /// Zero the weight of the last BatchNorm of every residual block (bn2 of a BasicBlock,
  /// bn3 of a Bottleneck), so that each block starts as the identity (torchvision's
  /// zero_init_residual, default false).
  KINDLING_ARG(bool, zero_init_residual) = false;

  /// Small-input stem (default false): conv1 becomes a 3x3 convolution with stride 1 and
  /// padding 1 (still 64 output channels, no bias) and the max pooling is removed, so a
  /// 32x32 image reaches layer4 as 4x4 instead of 1x1. This is the common CIFAR variant of
  /// ResNet; it is not in torchvision. Parameter names do not change (conv1.weight is
  /// [64, in_channels, 3, 3] instead of [64, in_channels, 7, 7]).
  KINDLING_ARG(bool, cifar_stem) = false;
};

/// The residual block type: BasicBlock (two 3x3 convolutions, expansion 1; ResNet-18/34)
/// or Bottleneck (1x1, 3x3, 1x1 convolutions, expansion 4; ResNet-50 and deeper).
enum class ResNetBlock { kBasic, kBottleneck };

/// torchvision's ResNet: conv1, bn1, relu, maxpool, layer1..layer4 (torch::nn::Sequential
/// of residual blocks, named "0", "1", ..., each in a kindling::nn::Unit, which keeps the names), adaptive average pooling to 1x1, flatten, fc.
/// A block whose stride is not 1 or whose input channels differ from its output channels
/// has a "downsample" shortcut: Sequential(1x1 convolution without bias, BatchNorm2d).
class KINDLING_API ResNetImpl : public torch::nn::Cloneable<ResNetImpl> {
 public:
  /// `layers`: the number of blocks of layer1..layer4 (four values), e.g. {2, 2, 2, 2}
  /// with ResNetBlock::kBasic for ResNet-18, {3, 4, 23, 3} with kBottleneck for ResNet-101.
  /// Throws kindling::UsageError unless `layers` has four values, each at least 1, and
  /// num_classes and in_channels are positive. Local; does not communicate.
  ResNetImpl(ResNetBlock block, std::vector<int64_t> layers, const ResNetOptions& options = ResNetOptions());

  /// Builds every submodule and initialises all parameters and buffers; the constructor and
  /// clone() call it. Throws kindling::UsageError as the constructor does. On a model that
  /// still has its submodules, LibTorch's register_module throws c10::Error.
  void reset() override;

  /// Input [N, in_channels, H, W]; output logits [N, num_classes]. Throws
  /// kindling::UsageError for another input shape. With synchronized BatchNorm layers (see
  /// kindling::nn::BatchNorm2d::forward) it communicates in training mode: then every rank
  /// of the BatchNorm group must call it, in the same order, and it can throw
  /// kindling::TimeoutError / kindling::CommunicationError.
  at::Tensor forward(const at::Tensor& x);

  void pretty_print(std::ostream& stream) const override;

  ResNetBlock block;
  std::vector<int64_t> layers;
  ResNetOptions options;

  torch::nn::Conv2d conv1{nullptr};
  kindling::nn::BatchNorm2d bn1{nullptr};
  /// Null with cifar_stem.
  torch::nn::MaxPool2d maxpool{nullptr};
  /// The four layers, each a unit of sharding (kindling/nn/unit.h: a pass-through elsewhere).
  kindling::nn::Unit<torch::nn::SequentialImpl> layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

/// ResNet-18: BasicBlock, layers {2, 2, 2, 2}; 11,689,512 parameters with the defaults.
/// The three factories throw kindling::UsageError for invalid options (see ResNetImpl).
KINDLING_API ResNet resnet18(const ResNetOptions& options = ResNetOptions());
/// ResNet-34: BasicBlock, layers {3, 4, 6, 3}; 21,797,672 parameters with the defaults.
KINDLING_API ResNet resnet34(const ResNetOptions& options = ResNetOptions());
/// ResNet-50: Bottleneck, layers {3, 4, 6, 3}; 25,557,032 parameters with the defaults.
KINDLING_API ResNet resnet50(const ResNetOptions& options = ResNetOptions());

}  // namespace models
}  // namespace kindling
