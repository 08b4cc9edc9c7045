// ResNet-18/34/50 with torchvision's architecture, names and initialisation
// (see include/kindling/models/resnet.h).
#include "kindling/models/resnet.h"

#include <torch/nn/init.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/options/conv.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/options/pooling.h>

#include <ATen/ATen.h>

#include <utility>

#include "kindling/error.h"

namespace kindling {
namespace models {
namespace {

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

torch::nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

kindling::nn::BatchNorm2d batchnorm(int64_t features) {
  return kindling::nn::BatchNorm2d(torch::nn::BatchNormOptions(features));
}

// The shortcut of a block that changes resolution or channels: 1x1 convolution + BN,
// named downsample.0 / downsample.1 as in torchvision.
torch::nn::Sequential make_downsample(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Sequential(conv1x1(in, out, stride), batchnorm(out));
}

// torchvision's BasicBlock: 3x3 conv (stride) - BN - ReLU - 3x3 conv - BN, + shortcut, ReLU.
class BasicBlockImpl : public torch::nn::Cloneable<BasicBlockImpl> {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride, bool with_downsample)
      : inplanes_(inplanes), planes_(planes), stride_(stride), with_downsample_(with_downsample) {
    reset();
  }

  void reset() override {
    conv1 = register_module("conv1", conv3x3(inplanes_, planes_, stride_));
    bn1 = register_module("bn1", batchnorm(planes_));
    conv2 = register_module("conv2", conv3x3(planes_, planes_, 1));
    bn2 = register_module("bn2", batchnorm(planes_));
    downsample = nullptr;
    if (with_downsample_) {
      downsample = register_module("downsample", make_downsample(inplanes_, planes_ * kExpansion, stride_));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    // In place, as torchvision's: the ReLUs and the sum reuse the fresh BN output (no BN
    // here, native or synchronised, keeps its output for backward), where out-of-place
    // steps allocated two more activation-sized tensors per block.
    auto out = bn1->forward(conv1->forward(x)).relu_();
    out = bn2->forward(conv2->forward(out));
    out.add_(downsample ? downsample->forward(x) : x);
    return at::relu_(out);
  }

  void pretty_print(std::ostream& stream) const override { stream << "BasicBlock"; }

  // The BN whose weight zero_init_residual zeroes.
  kindling::nn::BatchNorm2d& last_bn() { return bn2; }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  kindling::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};

 private:
  int64_t inplanes_, planes_, stride_;
  bool with_downsample_;
};
TORCH_MODULE(BasicBlock);

// torchvision's Bottleneck ("ResNet v1.5", stride on the 3x3 convolution):
// 1x1 conv - BN - ReLU - 3x3 conv (stride) - BN - ReLU - 1x1 conv (x4 channels) - BN,
// + shortcut, ReLU.
class BottleneckImpl : public torch::nn::Cloneable<BottleneckImpl> {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride, bool with_downsample)
      : inplanes_(inplanes), planes_(planes), stride_(stride), with_downsample_(with_downsample) {
    reset();
  }

  void reset() override {
    const int64_t width = planes_;  // groups 1, base width 64
    conv1 = register_module("conv1", conv1x1(inplanes_, width, 1));
    bn1 = register_module("bn1", batchnorm(width));
    conv2 = register_module("conv2", conv3x3(width, width, stride_));
    bn2 = register_module("bn2", batchnorm(width));
    conv3 = register_module("conv3", conv1x1(width, planes_ * kExpansion, 1));
    bn3 = register_module("bn3", batchnorm(planes_ * kExpansion));
    downsample = nullptr;
    if (with_downsample_) {
      downsample = register_module("downsample", make_downsample(inplanes_, planes_ * kExpansion, stride_));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    auto out = bn1->forward(conv1->forward(x)).relu_();  // in place, as in BasicBlock
    out = bn2->forward(conv2->forward(out)).relu_();
    out = bn3->forward(conv3->forward(out));
    out.add_(downsample ? downsample->forward(x) : x);
    return at::relu_(out);
  }

  void pretty_print(std::ostream& stream) const override { stream << "Bottleneck"; }

  kindling::nn::BatchNorm2d& last_bn() { return bn3; }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  kindling::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};

 private:
  int64_t inplanes_, planes_, stride_;
  bool with_downsample_;
};
TORCH_MODULE(Bottleneck);

// torchvision's _make_layer: `blocks` blocks of `planes` (x expansion) output channels, the
// first with `stride` and, when the shape changes, a downsample shortcut.
template <class Block>
torch::nn::Sequential make_layer(int64_t& inplanes, int64_t planes, int64_t blocks, int64_t stride) {
  torch::nn::Sequential layer;
  const int64_t out = planes * Block::ContainedType::kExpansion;
  layer->push_back(Block(inplanes, planes, stride, stride != 1 || inplanes != out));
  inplanes = out;
  for (int64_t i = 1; i < blocks; ++i) layer->push_back(Block(inplanes, planes, 1, false));
  return layer;
}

}  // namespace

ResNetImpl::ResNetImpl(ResNetBlock block_, std::vector<int64_t> layers_, const ResNetOptions& options_)
    : block(block_), layers(std::move(layers_)), options(options_) {
  reset();
}

void ResNetImpl::reset() {
  KINDLING_CHECK(layers.size() == 4, "kindling::models::ResNet: `layers` must hold 4 block counts, got ",
                 layers.size());
  for (auto n : layers) {
    KINDLING_CHECK(n >= 1, "kindling::models::ResNet: every layer needs at least one block, got ", n);
  }
  KINDLING_CHECK(options.num_classes() >= 1, "kindling::models::ResNet: num_classes must be positive, got ",
                 options.num_classes());
  KINDLING_CHECK(options.in_channels() >= 1, "kindling::models::ResNet: in_channels must be positive, got ",
                 options.in_channels());

  // Stem.
  if (options.cifar_stem()) {
    conv1 = register_module(
        "conv1",
        torch::nn::Conv2d(torch::nn::Conv2dOptions(options.in_channels(), 64, 3).stride(1).padding(1).bias(false)));
  } else {
    conv1 = register_module(
        "conv1",
        torch::nn::Conv2d(torch::nn::Conv2dOptions(options.in_channels(), 64, 7).stride(2).padding(3).bias(false)));
  }
  bn1 = register_module("bn1", batchnorm(64));
  maxpool = nullptr;
  if (!options.cifar_stem()) {
    maxpool = register_module("maxpool", torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1)));
  }

  // Residual stages.
  int64_t inplanes = 64;
  const bool basic = block == ResNetBlock::kBasic;
  auto make = [&](int64_t planes, int64_t blocks, int64_t stride) {
    return basic ? make_layer<BasicBlock>(inplanes, planes, blocks, stride)
                 : make_layer<Bottleneck>(inplanes, planes, blocks, stride);
  };
  layer1 = register_module("layer1", kindling::nn::Unit<torch::nn::SequentialImpl>(make(64, layers[0], 1)));
  layer2 = register_module("layer2", kindling::nn::Unit<torch::nn::SequentialImpl>(make(128, layers[1], 2)));
  layer3 = register_module("layer3", kindling::nn::Unit<torch::nn::SequentialImpl>(make(256, layers[2], 2)));
  layer4 = register_module("layer4", kindling::nn::Unit<torch::nn::SequentialImpl>(make(512, layers[3], 2)));

  // Head.
  avgpool = register_module("avgpool", torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions({1, 1})));
  fc = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(inplanes, options.num_classes())));

  // torchvision's initialisation (fc keeps Linear's default initialisation).
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<kindling::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    }
  }
  if (options.zero_init_residual()) {
    for (const auto& module : modules(/*include_self=*/false)) {
      if (auto* basic_block = module->as<BasicBlock>()) {
        torch::nn::init::zeros_(basic_block->last_bn()->weight);
      } else if (auto* bottleneck = module->as<Bottleneck>()) {
        torch::nn::init::zeros_(bottleneck->last_bn()->weight);
      }
    }
  }
}

at::Tensor ResNetImpl::forward(const at::Tensor& x) {
  KINDLING_CHECK(x.dim() == 4 && x.size(1) == options.in_channels(), "kindling::models::ResNet: expected input [N, ",
                 options.in_channels(), ", H, W], got ", x.sizes());
  auto out = bn1->forward(conv1->forward(x)).relu_();
  if (maxpool) out = maxpool->forward(out);
  out = layer1->forward(out);
  out = layer2->forward(out);
  out = layer3->forward(out);
  out = layer4->forward(out);
  out = avgpool->forward(out);
  out = out.flatten(1);
  return fc->forward(out);
}

void ResNetImpl::pretty_print(std::ostream& stream) const {
  stream << "kindling::models::ResNet(block=" << (block == ResNetBlock::kBasic ? "BasicBlock" : "Bottleneck")
         << ", layers=[" << layers[0] << ", " << layers[1] << ", " << layers[2] << ", " << layers[3]
         << "], num_classes=" << options.num_classes() << ", in_channels=" << options.in_channels()
         << (options.cifar_stem() ? ", cifar_stem=true" : "") << ")";
}

ResNet resnet18(const ResNetOptions& options) {
  return ResNet(ResNetBlock::kBasic, std::vector<int64_t>{2, 2, 2, 2}, options);
}

ResNet resnet34(const ResNetOptions& options) {
  return ResNet(ResNetBlock::kBasic, std::vector<int64_t>{3, 4, 6, 3}, options);
}

ResNet resnet50(const ResNetOptions& options) {
  return ResNet(ResNetBlock::kBottleneck, std::vector<int64_t>{3, 4, 6, 3}, options);
}

}  // namespace models
}  // namespace kindling
