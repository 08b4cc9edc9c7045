"""The benchmark models in Python PyTorch, identical to kindling's C++ ones.

- MLP: Flatten -> Linear(784, 1024) -> ReLU -> Linear(1024, 1024) -> ReLU -> Linear(1024, 10)
  (by default; `width` and `depth` make it wider and deeper, as bench_ddp's --mlp-width/--mlp-depth).
- ResNet-18/34/50: torchvision's architecture, parameter names and initialisation (written
  out here because torchvision is not installed), the same as kindling::models::ResNet
  (include/kindling/models/resnet.h), including its `cifar_stem` option (3x3 stride-1
  conv1, no max pooling). The ReLUs are placed as in the C++ model: out of place after
  each BatchNorm, in place on the residual sum.

    /usr/bin/python3 -c "import models; m = models.resnet18(1000, 3); print(sum(p.numel() for p in m.parameters()))"
    # 11689512, torchvision's figure
"""
import torch
import torch.nn as nn


class MLP(nn.Module):
    """Flatten, `depth` hidden layers of `width` (Linear, ReLU), Linear(width, 10)."""
    def __init__(self, width=1024, depth=2):
        super().__init__()
        layers = [nn.Flatten()]
        for i in range(depth):
            layers += [nn.Linear(784 if i == 0 else width, width), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Linear(width, 10))

    def forward(self, x):
        return self.net(x)


def _conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def last_bn(self):
        return self.bn2

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return torch.relu_(out + identity)


class Bottleneck(nn.Module):
    """ResNet v1.5: the stride is on the 3x3 convolution."""

    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        width = planes
        self.conv1 = _conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.downsample = downsample

    def last_bn(self):
        return self.bn3

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return torch.relu_(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000, in_channels=3, zero_init_residual=False, cifar_stem=False):
        super().__init__()
        if cifar_stem:
            self.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = None if cifar_stem else nn.MaxPool2d(3, stride=2, padding=1)
        self.inplanes = 64
        self.layer1 = self._make_layer(block, 64, layers[0], 1)
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, (BasicBlock, Bottleneck)):
                    nn.init.zeros_(m.last_bn().weight)

    def _make_layer(self, block, planes, blocks, stride):
        out = planes * block.expansion
        downsample = None
        if stride != 1 or self.inplanes != out:
            downsample = nn.Sequential(_conv1x1(self.inplanes, out, stride), nn.BatchNorm2d(out))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = out
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes=10, in_channels=1, **kwargs):
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes, in_channels, **kwargs)


def resnet34(num_classes=10, in_channels=1, **kwargs):
    return ResNet(BasicBlock, [3, 4, 6, 3], num_classes, in_channels, **kwargs)


def resnet50(num_classes=10, in_channels=1, **kwargs):
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, in_channels, **kwargs)
