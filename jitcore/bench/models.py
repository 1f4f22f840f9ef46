"""The models of `python -m jitcore bench --models`, built offline with random weights
(seeded), float32, in eval mode, at a given batch (the leading dimension of the input: images,
token sequences, MLP rows). ResNet-18 and MobileNetV2 are defined here (the torchvision wheel
of the package registry does not import next to the CPU torch wheel); BERT, GPT-2, ResNet-50,
EfficientNet-B0 and ConvNeXt-T come from transformers' definitions and configs when it is
installed (its image classifiers wrapped to return the logits). Imported only in model
children: torch loads at import.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F


class MLP(nn.Module):
    """Linear -> GELU layers, then a layer norm."""

    def __init__(self, width: int = 1024, layers: int = 3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        for layer in self.layers:
            x = F.gelu(layer(x))
        return self.norm(x)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """ResNet-18 as torchvision defines it (BasicBlock x [2, 2, 2, 2])."""

    def __init__(self, classes: int = 1000, width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for k, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            blocks += [BasicBlock(cin, cout, 1 if k == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), nn.ReLU6(),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    """MobileNetV2 (inverted residuals, depthwise 3x3, relu6), width 1.0."""

    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class Output(nn.Module):
    """A transformers model returning one tensor of its output: `attr` (the last hidden state
    of an encoder, the logits of a classifier), called with `kwargs` (GPT-2 without the KV
    cache)."""

    def __init__(self, model, attr: str, **kwargs):
        super().__init__()
        self.model, self.attr, self.kwargs = model, attr, kwargs

    def forward(self, x):
        return getattr(self.model(x, **self.kwargs), self.attr)


def _bert(tiny: bool, batch: int):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128) if tiny else BertConfig()
    return Output(BertModel(cfg), "last_hidden_state"), (_ids(cfg.vocab_size, tiny, batch),)


def _gpt2(tiny: bool, batch: int):
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(n_embd=64, n_layer=2, n_head=2) if tiny else GPT2Config()
    return (Output(GPT2Model(cfg), "last_hidden_state", use_cache=False),
            (_ids(cfg.vocab_size, tiny, batch),))


def _resnet50(tiny: bool, batch: int):
    """ResNet-50 v1.5: ResNetConfig's defaults are it (bottleneck blocks [3, 4, 6, 3] of
    widths 256-2048 after a 64-channel stem, the stride in the 3x3 conv; 25.56M parameters
    with 1000 classes, as torchvision's resnet50)."""
    from transformers import ResNetConfig, ResNetForImageClassification
    cfg = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10) \
        if tiny else ResNetConfig(num_labels=1000)
    return _classifier(ResNetForImageClassification(cfg), tiny, batch)


def _efficientnet_b0(tiny: bool, batch: int):
    """EfficientNet-B0. EfficientNetConfig's defaults are B7 (width 2.0, depth 3.1, 600x600),
    so B0's coefficients are given: width and depth 1.0, 1280 head channels, 224x224 (5.29M
    parameters with 1000 classes, as google/efficientnet-b0). Its pooler, AvgPool2d(hidden_dim,
    ceil_mode=True) over the last feature map (a window past the map: the mean of all of it),
    is swapped for the same mean as AdaptiveAvgPool2d(1) for every system: OpenVINO 2026.4
    converts the original to an output of batch 0 (dynamic shapes) or rejects it (static)."""
    from transformers import EfficientNetConfig, EfficientNetForImageClassification
    cfg = EfficientNetConfig(
        image_size=32, width_coefficient=0.25, depth_coefficient=0.5, kernel_sizes=[3, 5],
        in_channels=[32, 16], out_channels=[16, 32], strides=[1, 2], num_block_repeats=[1, 1],
        expand_ratios=[1, 4], depthwise_padding=[2], hidden_dim=320, num_labels=10) if tiny \
        else EfficientNetConfig(image_size=224, width_coefficient=1.0, depth_coefficient=1.0,
                                hidden_dim=1280, dropout_rate=0.2, num_labels=1000)
    model = EfficientNetForImageClassification(cfg)
    model.efficientnet.pooler = nn.AdaptiveAvgPool2d(1)
    return _classifier(model, tiny, batch)


def _convnext_tiny(tiny: bool, batch: int):
    """ConvNeXt-T: ConvNextConfig's defaults are it (stages of [3, 3, 9, 3] blocks, widths
    96-768, 4x4/s4 patchify stem; 28.59M parameters with 1000 classes). Layer scales drawn
    at random (their initial 1e-6 would make every block's branch invisible in the output)."""
    from transformers import ConvNextConfig, ConvNextForImageClassification
    cfg = ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, num_labels=10) \
        if tiny else ConvNextConfig(num_labels=1000)
    return _classifier(ConvNextForImageClassification(cfg), tiny, batch)


def _classifier(model: nn.Module, tiny: bool, batch: int):
    return Output(_randomize_batch_norms(model), "logits"), (_image(tiny, batch),)


def _ids(vocab: int, tiny: bool, batch: int):
    return torch.randint(0, vocab, (batch, 16 if tiny else 128),
                         generator=torch.Generator().manual_seed(1))


def _image(tiny: bool, batch: int):
    return torch.randn(batch, 3, 32 if tiny else 224, 32 if tiny else 224,
                       generator=torch.Generator().manual_seed(1))


def _randomize_batch_norms(model: nn.Module) -> nn.Module:
    """Running statistics other than 0/1, so a wrong batch-norm fold shows; layer scales
    (ConvNeXt's) in [0.5, 1.5)."""
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            scale = getattr(m, "layer_scale_parameter", None)
            if isinstance(scale, nn.Parameter):
                scale.copy_(torch.rand(scale.shape, generator=g) + 0.5)
    return model


@dataclass(frozen=True)
class Model:
    name: str
    title: str
    build: Callable            # (tiny, batch) -> (module, example inputs)
    needs: str | None = None   # an optional module it needs (transformers)


MODELS = [
    Model("mlp", "MLP: 3 x (Linear 1024 + GELU), layer norm; batch x 128 tokens x 1024",
          lambda tiny, batch: (MLP(64 if tiny else 1024),
                               (torch.randn(batch, 8 if tiny else 128, 64 if tiny else 1024,
                                            generator=torch.Generator().manual_seed(1)),))),
    Model("resnet18", "ResNet-18, batch x 3x224x224",
          lambda tiny, batch: (_randomize_batch_norms(ResNet18(10 if tiny else 1000,
                                                               8 if tiny else 64)),
                               (_image(tiny, batch),))),
    Model("mobilenet_v2", "MobileNetV2, batch x 3x224x224",
          lambda tiny, batch: (_randomize_batch_norms(MobileNetV2(10 if tiny else 1000)),
                               (_image(tiny, batch),))),
    Model("resnet50", "ResNet-50 (ResNetForImageClassification(ResNetConfig())), logits, "
          "batch x 3x224x224", _resnet50, "transformers"),
    Model("efficientnet_b0", "EfficientNet-B0 (EfficientNetForImageClassification), logits, "
          "batch x 3x224x224", _efficientnet_b0, "transformers"),
    Model("convnext_tiny", "ConvNeXt-T (ConvNextForImageClassification(ConvNextConfig())), "
          "logits, batch x 3x224x224", _convnext_tiny, "transformers"),
    Model("bert", "BERT-base encoder (BertModel(BertConfig())), sequence 128", _bert,
          "transformers"),
    Model("gpt2", "GPT-2 small (GPT2Model(GPT2Config()), use_cache=False), sequence 128",
          _gpt2, "transformers"),
]
BY_NAME = {m.name: m for m in MODELS}


def build(name: str, tiny: bool, batch: int = 1):
    """The model in eval form with seeded random weights, and its example inputs of
    `batch` images, sequences or rows."""
    torch.manual_seed(0)
    module, inputs = BY_NAME[name].build(tiny, batch)
    return module.eval(), inputs
