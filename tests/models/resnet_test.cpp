// kindling::models::ResNet against torchvision: parameter counts, state-dict names and
// shapes, initialisation, output shapes, the in_channels / num_classes / cifar_stem /
// zero_init_residual options, backward, clone. The reference figures are torchvision's
// (and bench/ddp/models.py's, which reproduces them in Python).
#include <gtest/gtest.h>
#include <kindling/error.h>
#include <kindling/models/resnet.h>
#include <kindling/nn/batchnorm.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace km = kindling::models;

namespace {

int64_t count_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// named_parameters() + named_buffers(): the entries of torchvision's state_dict().
std::map<std::string, at::Tensor> state(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value();
  return out;
}

void expect_shape(const std::map<std::string, at::Tensor>& s, const std::string& name, std::vector<int64_t> shape) {
  auto it = s.find(name);
  ASSERT_NE(it, s.end()) << name << " missing";
  EXPECT_EQ(it->second.sizes().vec(), shape) << name;
}

TEST(ResNet, ParameterCountsMatchTorchvision) {
  EXPECT_EQ(count_parameters(*km::resnet18()), 11689512);
  EXPECT_EQ(count_parameters(*km::resnet34()), 21797672);
  EXPECT_EQ(count_parameters(*km::resnet50()), 25557032);
}

TEST(ResNet, StateDictNamesMatchTorchvision) {
  auto r18 = km::resnet18();
  EXPECT_EQ(r18->named_parameters().size(), 62u);
  EXPECT_EQ(r18->named_buffers().size(), 60u);
  const auto s18 = state(*r18);
  EXPECT_EQ(s18.size(), 122u);  // len(torchvision.models.resnet18().state_dict())
  expect_shape(s18, "conv1.weight", {64, 3, 7, 7});
  expect_shape(s18, "bn1.weight", {64});
  expect_shape(s18, "bn1.bias", {64});
  expect_shape(s18, "bn1.running_mean", {64});
  expect_shape(s18, "bn1.running_var", {64});
  expect_shape(s18, "bn1.num_batches_tracked", {});
  expect_shape(s18, "layer1.0.conv1.weight", {64, 64, 3, 3});
  expect_shape(s18, "layer1.1.bn2.weight", {64});
  expect_shape(s18, "layer2.0.conv1.weight", {128, 64, 3, 3});
  expect_shape(s18, "layer2.0.downsample.0.weight", {128, 64, 1, 1});
  expect_shape(s18, "layer2.0.downsample.1.weight", {128});
  expect_shape(s18, "layer2.0.downsample.1.running_mean", {128});
  expect_shape(s18, "layer4.1.conv2.weight", {512, 512, 3, 3});
  expect_shape(s18, "fc.weight", {1000, 512});
  expect_shape(s18, "fc.bias", {1000});
  EXPECT_EQ(s18.count("layer1.0.downsample.0.weight"), 0u);  // layer1 of BasicBlock keeps 64 channels
  EXPECT_EQ(s18.count("layer2.1.downsample.0.weight"), 0u);
  EXPECT_EQ(s18.count("conv1.bias"), 0u);
  // Registration order as in torchvision (DDP buckets follow it).
  EXPECT_EQ(r18->named_parameters().keys().front(), "conv1.weight");
  EXPECT_EQ(r18->named_parameters().keys().back(), "fc.bias");

  auto r34 = km::resnet34();
  EXPECT_EQ(state(*r34).size(), 218u);

  auto r50 = km::resnet50();
  EXPECT_EQ(r50->named_parameters().size(), 161u);
  EXPECT_EQ(r50->named_buffers().size(), 159u);
  const auto s50 = state(*r50);
  EXPECT_EQ(s50.size(), 320u);
  expect_shape(s50, "layer1.0.conv1.weight", {64, 64, 1, 1});
  expect_shape(s50, "layer1.0.conv3.weight", {256, 64, 1, 1});
  expect_shape(s50, "layer1.0.downsample.0.weight", {256, 64, 1, 1});
  expect_shape(s50, "layer1.0.downsample.1.running_var", {256});
  expect_shape(s50, "layer1.1.conv1.weight", {64, 256, 1, 1});
  expect_shape(s50, "layer2.0.conv2.weight", {128, 128, 3, 3});
  expect_shape(s50, "layer4.2.conv3.weight", {2048, 512, 1, 1});
  expect_shape(s50, "layer4.2.bn3.num_batches_tracked", {});
  expect_shape(s50, "fc.weight", {1000, 2048});
  EXPECT_EQ(s50.count("layer1.1.downsample.0.weight"), 0u);
}

TEST(ResNet, BottleneckStridesOnThe3x3Convolution) {
  auto r50 = km::resnet50();
  bool found = false;
  for (const auto& m : r50->named_modules()) {
    if (m.key() == "layer2.0.conv1") {
      EXPECT_EQ(m.value()->as<torch::nn::Conv2d>()->options.stride()->at(0), 1);
    } else if (m.key() == "layer2.0.conv2") {
      EXPECT_EQ(m.value()->as<torch::nn::Conv2d>()->options.stride()->at(0), 2);
      found = true;
    } else if (m.key() == "layer2.0.downsample.0") {
      EXPECT_EQ(m.value()->as<torch::nn::Conv2d>()->options.stride()->at(0), 2);
    }
  }
  EXPECT_TRUE(found);
}

TEST(ResNet, EveryBatchNormIsKindlings) {
  auto r18 = km::resnet18();
  int kindling_bn = 0;
  for (const auto& m : r18->modules()) {
    if (m->as<kindling::nn::BatchNorm2d>()) ++kindling_bn;
    EXPECT_EQ(m->as<torch::nn::BatchNorm2d>(), nullptr);
  }
  EXPECT_EQ(kindling_bn, 1 + 8 * 2 + 3);  // stem, two per block, three downsample shortcuts
}

TEST(ResNet, TorchvisionInitialisation) {
  torch::manual_seed(0);
  auto r18 = km::resnet18();
  const auto s = state(*r18);
  // kaiming_normal_(mode=fan_out, nonlinearity=relu): std = sqrt(2 / (out_channels * k * k)).
  const auto& w = s.at("layer4.0.conv2.weight");
  EXPECT_NEAR(w.std().item<double>(), std::sqrt(2.0 / (512 * 9)), 0.02 * std::sqrt(2.0 / (512 * 9)));
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 1e-3);
  const auto& stem = s.at("conv1.weight");
  EXPECT_NEAR(stem.std().item<double>(), std::sqrt(2.0 / (64 * 49)), 0.05 * std::sqrt(2.0 / (64 * 49)));
  for (const auto& kv : s) {
    const auto& name = kv.first;
    auto ends_with = [&](const std::string& suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (name.rfind("fc.", 0) == 0) continue;
    if (kv.second.dim() == 1 && ends_with(".weight")) EXPECT_TRUE(kv.second.eq(1).all().item<bool>()) << name;
    if (ends_with(".bias")) EXPECT_TRUE(kv.second.eq(0).all().item<bool>()) << name;
    if (ends_with(".running_mean")) EXPECT_TRUE(kv.second.eq(0).all().item<bool>()) << name;
    if (ends_with(".running_var")) EXPECT_TRUE(kv.second.eq(1).all().item<bool>()) << name;
  }
  // fc keeps Linear's default: uniform in +-1/sqrt(in_features).
  const double bound = 1.0 / std::sqrt(512.0);
  EXPECT_LE(s.at("fc.weight").abs().max().item<double>(), bound);
  EXPECT_LE(s.at("fc.bias").abs().max().item<double>(), bound);
  EXPECT_GT(s.at("fc.bias").abs().max().item<double>(), 0.0);
}

TEST(ResNet, OutputShapes) {
  torch::manual_seed(0);
  auto r18 = km::resnet18();
  auto out = r18->forward(torch::randn({2, 3, 224, 224}));
  EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{2, 1000}));
  EXPECT_TRUE(out.isfinite().all().item<bool>());

  auto r50 = km::resnet50();
  r50->eval();
  torch::NoGradGuard no_grad;
  auto out50 = r50->forward(torch::randn({1, 3, 64, 64}));
  EXPECT_EQ(out50.sizes().vec(), (std::vector<int64_t>{1, 1000}));
  EXPECT_TRUE(out50.isfinite().all().item<bool>());
}

TEST(ResNet, ClassesAndInputChannels) {
  auto model = km::resnet18(km::ResNetOptions().num_classes(10).in_channels(1));
  const auto s = state(*model);
  expect_shape(s, "conv1.weight", {64, 1, 7, 7});
  expect_shape(s, "fc.weight", {10, 512});
  EXPECT_EQ(count_parameters(*model), 11175370);  // models.resnet18(10, 1) of bench/ddp/models.py
  auto out = model->forward(torch::randn({4, 1, 28, 28}));
  EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{4, 10}));
  EXPECT_THROW(model->forward(torch::randn({4, 3, 28, 28})), kindling::UsageError);
}

TEST(ResNet, CifarStem) {
  auto model = km::resnet18(km::ResNetOptions().num_classes(10).cifar_stem(true));
  const auto s = state(*model);
  expect_shape(s, "conv1.weight", {64, 3, 3, 3});
  EXPECT_EQ(count_parameters(*model), 11173962);  // the usual CIFAR ResNet-18 figure
  EXPECT_EQ(s.size(), 122u);
  EXPECT_TRUE(model->maxpool.is_empty());
  EXPECT_EQ(model->named_children().find("maxpool"), nullptr);
  auto conv1 = model->conv1->options;
  EXPECT_EQ(conv1.stride()->at(0), 1);
  // Padding 1 keeps 32x32 (checked by its effect: padding_t is c10::variant in 1.13, std::variant in 2.x).
  EXPECT_EQ(model->conv1->forward(torch::randn({1, 3, 32, 32})).size(2), 32);

  auto x = torch::randn({2, 3, 32, 32});
  auto out = model->forward(x);
  EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{2, 10}));
  // Without the stride-2 stem and the max pooling, 32x32 reaches layer4 as 4x4.
  auto h = at::relu(model->bn1->forward(model->conv1->forward(x)));
  h = model->layer4->forward(model->layer3->forward(model->layer2->forward(model->layer1->forward(h))));
  EXPECT_EQ(h.sizes().vec(), (std::vector<int64_t>{2, 512, 4, 4}));

  // The default stem is torchvision's.
  auto standard = km::resnet18();
  EXPECT_FALSE(standard->maxpool.is_empty());
  EXPECT_EQ(standard->conv1->options.stride()->at(0), 2);
}

std::set<std::string> zeroed_bn_weights(const torch::nn::Module& m) {
  std::set<std::string> out;
  for (const auto& p : m.named_parameters()) {
    if (p.key().rfind("fc.", 0) == 0 || p.value().dim() != 1) continue;
    const auto& name = p.key();
    if (name.size() < 7 || name.compare(name.size() - 7, 7, ".weight") != 0) continue;
    if (p.value().eq(0).all().item<bool>()) {
      out.insert(name);
    } else {
      EXPECT_TRUE(p.value().eq(1).all().item<bool>()) << name;
    }
  }
  return out;
}

TEST(ResNet, ZeroInitResidual) {
  EXPECT_TRUE(zeroed_bn_weights(*km::resnet18()).empty());
  EXPECT_EQ(zeroed_bn_weights(*km::resnet18(km::ResNetOptions().zero_init_residual(true))),
            (std::set<std::string>{"layer1.0.bn2.weight", "layer1.1.bn2.weight", "layer2.0.bn2.weight",
                                   "layer2.1.bn2.weight", "layer3.0.bn2.weight", "layer3.1.bn2.weight",
                                   "layer4.0.bn2.weight", "layer4.1.bn2.weight"}));
  std::set<std::string> expected50;
  const int blocks[] = {3, 4, 6, 3};
  for (int l = 0; l < 4; ++l) {
    for (int b = 0; b < blocks[l]; ++b) {
      expected50.insert("layer" + std::to_string(l + 1) + "." + std::to_string(b) + ".bn3.weight");
    }
  }
  EXPECT_EQ(zeroed_bn_weights(*km::resnet50(km::ResNetOptions().zero_init_residual(true))), expected50);
}

TEST(ResNet, BackwardReachesEveryParameter) {
  torch::manual_seed(0);
  auto model = km::resnet18(km::ResNetOptions().num_classes(10));
  model->train();
  auto out = model->forward(torch::randn({2, 3, 64, 64}));
  (out * torch::randn_like(out)).sum().backward();
  for (const auto& p : model->named_parameters()) {
    const auto& g = p.value().grad();
    ASSERT_TRUE(g.defined()) << p.key();
    EXPECT_EQ(g.sizes().vec(), p.value().sizes().vec()) << p.key();
    EXPECT_TRUE(g.isfinite().all().item<bool>()) << p.key();
    EXPECT_TRUE(g.ne(0).any().item<bool>()) << p.key();
  }
  // Training mode updates the BatchNorm statistics.
  EXPECT_EQ(state(*model).at("bn1.num_batches_tracked").item<int64_t>(), 1);
}

TEST(ResNet, CloneIsADeepCopy) {
  torch::manual_seed(0);
  auto model = km::resnet18(km::ResNetOptions().num_classes(10));
  auto copy = std::dynamic_pointer_cast<km::ResNetImpl>(model->clone());
  ASSERT_NE(copy, nullptr);
  const auto a = state(*model), b = state(*copy);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& kv : a) {
    ASSERT_EQ(b.count(kv.first), 1u) << kv.first;
    EXPECT_TRUE(torch::equal(kv.second, b.at(kv.first))) << kv.first;
    EXPECT_NE(kv.second.data_ptr(), b.at(kv.first).data_ptr()) << kv.first;
  }
  model->eval();
  copy->eval();
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 3, 32, 32});
  EXPECT_TRUE(torch::equal(model->forward(x), copy->forward(x)));
}

TEST(ResNet, Validation) {
  const std::vector<int64_t> three_layers{2, 2, 2}, empty_layer{2, 0, 2, 2}, r101_layers{3, 4, 23, 3};
  EXPECT_THROW(km::ResNet(km::ResNetBlock::kBasic, three_layers), kindling::UsageError);
  EXPECT_THROW(km::ResNet(km::ResNetBlock::kBasic, empty_layer), kindling::UsageError);
  EXPECT_THROW(km::resnet18(km::ResNetOptions().num_classes(0)), kindling::UsageError);
  // The generic constructor builds the other depths, e.g. ResNet-101.
  auto r101 = km::ResNet(km::ResNetBlock::kBottleneck, r101_layers);
  EXPECT_EQ(count_parameters(*r101), 44549160);
  std::ostringstream printed;
  printed << *r101;
  EXPECT_NE(printed.str().find("Bottleneck"), std::string::npos);
}

}  // namespace
