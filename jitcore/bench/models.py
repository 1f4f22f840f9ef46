"""The models of `python -m jitcore bench --models`, built offline with random weights
(seeded), batch 1, float32. The CNNs are defined here (the torchvision wheel of the package
registry does not import next to the CPU torch wheel); BERT and GPT-2 come from transformers
when it is installed. Imported only in model children: torch loads at import.
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


class HiddenState(nn.Module):
    """A transformers model called on token ids, returning its last hidden state (GPT-2
    without the KV cache)."""

    def __init__(self, model, **kwargs):
        super().__init__()
        self.model, self.kwargs = model, kwargs

    def forward(self, ids):
        return self.model(ids, **self.kwargs).last_hidden_state


def _bert(tiny: bool):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128) if tiny else BertConfig()
    return HiddenState(BertModel(cfg)), (_ids(cfg.vocab_size, tiny),)


def _gpt2(tiny: bool):
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(n_embd=64, n_layer=2, n_head=2) if tiny else GPT2Config()
    return HiddenState(GPT2Model(cfg), use_cache=False), (_ids(cfg.vocab_size, tiny),)


def _ids(vocab: int, tiny: bool):
    return torch.randint(0, vocab, (1, 16 if tiny else 128),
                         generator=torch.Generator().manual_seed(1))


def _image(tiny: bool):
    return torch.randn(1, 3, 32 if tiny else 224, 32 if tiny else 224,
                       generator=torch.Generator().manual_seed(1))


def _randomize_batch_norms(model: nn.Module) -> nn.Module:
    """Running statistics other than 0/1, so a wrong batch-norm fold shows."""
    g = torch.Generator().manual_seed(2)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model


@dataclass(frozen=True)
class Model:
    name: str
    title: str
    build: Callable            # tiny -> (module, example inputs)
    needs: str | None = None   # an optional module it needs (transformers)


MODELS = [
    Model("mlp", "MLP: 3 x (Linear 1024 + GELU), layer norm; 128 tokens x 1024",
          lambda tiny: (MLP(64 if tiny else 1024),
                        (torch.randn(1, 8 if tiny else 128, 64 if tiny else 1024,
                                     generator=torch.Generator().manual_seed(1)),))),
    Model("resnet18", "ResNet-18, 1x3x224x224",
          lambda tiny: (_randomize_batch_norms(ResNet18(10 if tiny else 1000,
                                                        8 if tiny else 64)), (_image(tiny),))),
    Model("mobilenet_v2", "MobileNetV2, 1x3x224x224",
          lambda tiny: (_randomize_batch_norms(MobileNetV2(10 if tiny else 1000)),
                        (_image(tiny),))),
    Model("bert", "BERT-base encoder (BertModel(BertConfig())), sequence 128", _bert,
          "transformers"),
    Model("gpt2", "GPT-2 small (GPT2Model(GPT2Config()), use_cache=False), sequence 128",
          _gpt2, "transformers"),
]
BY_NAME = {m.name: m for m in MODELS}


def build(name: str, tiny: bool):
    """The model in eval form with seeded random weights, and its example inputs."""
    torch.manual_seed(0)
    module, inputs = BY_NAME[name].build(tiny)
    return module.eval(), inputs
