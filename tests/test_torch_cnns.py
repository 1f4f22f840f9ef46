"""Every convolutional model of transformers compiles through jitcore.torch and matches eager.

Each model is built from a tiny config (a few channels, one block per stage, small inputs)
with random weights and random batch-norm statistics, compiled, and its output compared
with the float64 reference (a double copy of the model, run eager): normwise relative error
within TOL for float32. Every node runs in jitcore, the convolutions above all: no node
stays in torch (`fallbacks` would list it, with explain()'s reason).

Also every argument form of aten.convolution: lists shorter than the spatial rank, "same" and
"valid" padding, 1-d and depthwise 1-d, grouped and dilated, transposed (1-d and 2-d, strides,
output_padding, groups, padding larger than the kernel's reach); and F.interpolate's nearest
and bilinear resizing.
"""
from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jitcore.torch as jt                  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)
TOL = 1e-5               # normwise, float32 against the float64 reference (seen: <= 4e-7)


def _randomize_norms(model):
    """Batch-norm statistics and affine weights away from their 0/1 defaults (else a folded
    batch norm is an identity and a wrong fold would pass)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                n = mod.num_features
                mod.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
                mod.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.5)
                if mod.affine:
                    mod.weight.copy_(torch.rand(n, generator=g) + 0.5)
                    mod.bias.copy_(torch.rand(n, generator=g) - 0.5)
    return model


class Hidden(torch.nn.Module):
    """A transformers model returning one tensor: its `last_hidden_state` (or `attr`)."""

    def __init__(self, model, attr="last_hidden_state"):
        super().__init__()
        self.model, self.attr = model, attr

    def forward(self, x):
        return getattr(self.model(x), self.attr)


def _image(size=32, channels=3):
    return (torch.randn(1, channels, size, size),)


def resnet(layer_type):
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                    layer_type=layer_type)
    return transformers.ResNetModel(cfg), _image()


def mobilenet_v1():
    cfg = transformers.MobileNetV1Config(depth_multiplier=0.25, image_size=32)
    return transformers.MobileNetV1Model(cfg), _image()


def mobilenet_v2():
    cfg = transformers.MobileNetV2Config(depth_multiplier=0.25, image_size=32)
    return transformers.MobileNetV2Model(cfg), _image()


def efficientnet():
    cfg = transformers.EfficientNetConfig(
        image_size=32, width_coefficient=0.25, depth_coefficient=0.5, kernel_sizes=[3, 5],
        in_channels=[32, 16], out_channels=[16, 32], strides=[1, 2], num_block_repeats=[1, 1],
        expand_ratios=[1, 4], depthwise_padding=[2], hidden_dim=320)
    return transformers.EfficientNetModel(cfg), _image()


def convnext(v2=False):
    kind = transformers.ConvNextV2Config if v2 else transformers.ConvNextConfig
    cfg = kind(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, image_size=32)
    model = transformers.ConvNextV2Model(cfg) if v2 else transformers.ConvNextModel(cfg)
    return model, _image()


def regnet():
    cfg = transformers.RegNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                    groups_width=4)
    return transformers.RegNetModel(cfg), _image()


def mobilevit():
    # 48x48: the 6x6 map divides into 2x2 patches, the 3x3 one is resized (bilinear) to 4x4
    # and back, as MobileViT does
    cfg = transformers.MobileViTConfig(image_size=48, hidden_sizes=[16, 16, 16],
                                       neck_hidden_sizes=[8, 8, 8, 8, 8, 8, 16],
                                       num_attention_heads=2, expand_ratio=2.0)
    return transformers.MobileViTModel(cfg), _image(48)


def segformer():
    """The encoder and the semantic-segmentation head (its maps resized bilinearly)."""
    cfg = transformers.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                       hidden_sizes=[8, 16], patch_sizes=[7, 3],
                                       strides=[4, 2], num_attention_heads=[1, 2],
                                       mlp_ratios=[2, 2], drop_path_rate=0.0,
                                       decoder_hidden_size=16, num_labels=3)
    model = transformers.SegformerForSemanticSegmentation(cfg)
    return Hidden(model, "logits"), _image()


def poolformer():
    cfg = transformers.PoolFormerConfig(hidden_sizes=[8, 16], depths=[1, 1],
                                        num_encoder_blocks=2, patch_sizes=[7, 3],
                                        strides=[4, 2], padding=[2, 1])
    return transformers.PoolFormerModel(cfg), _image()


def levit():
    cfg = transformers.LevitConfig(image_size=64, hidden_sizes=[16, 24, 32],
                                   num_attention_heads=[2, 2, 2], depths=[1, 1, 1],
                                   key_dim=[8, 8, 8], mlp_ratio=[2, 2, 2],
                                   attention_ratio=[2, 2, 2])
    return transformers.LevitModel(cfg), _image(64)


def _speech_config(kind):
    return kind(conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=32, num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4)


def wav2vec2_features(norm="group"):
    """The conv stack alone (k=10 s5, then k=3 s2): group norm after the first conv, or
    ("layer") a layer norm over channels after each, with conv biases."""
    cfg = _speech_config(transformers.Wav2Vec2Config)
    cfg.feat_extract_norm, cfg.conv_bias = norm, norm == "layer"
    return transformers.Wav2Vec2Model(cfg).feature_extractor, (torch.randn(1, 800),)


def wav2vec2():
    model = transformers.Wav2Vec2Model(_speech_config(transformers.Wav2Vec2Config))
    return Hidden(model), (torch.randn(1, 800),)


def hubert():
    model = transformers.HubertModel(_speech_config(transformers.HubertConfig))
    return Hidden(model), (torch.randn(1, 800),)


MODELS = {
    "resnet_basic": lambda: resnet("basic"),
    "resnet_bottleneck": lambda: resnet("bottleneck"),
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "efficientnet": efficientnet,
    "convnext": convnext,
    "convnext_v2": lambda: convnext(v2=True),
    "regnet": regnet,
    "mobilevit": mobilevit,
    "segformer": segformer,
    "poolformer": poolformer,
    "levit": levit,
    "wav2vec2_features": wav2vec2_features,
    "wav2vec2_features_layer_norm": lambda: wav2vec2_features("layer"),
    "wav2vec2": wav2vec2,
    "hubert": hubert,
}
XFAIL = {}              # name -> why it cannot pass yet (strict xfail); none today


def _wrap(model):
    """A module returning one tensor (transformers models return ModelOutput objects)."""
    if isinstance(model, transformers.PreTrainedModel):
        return Hidden(model)
    return model


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    strict=True, reason=XFAIL[n])) if n in XFAIL else n for n in MODELS])
def test_transformers_cnn_matches_eager(name):
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    model = _wrap(_randomize_norms(model)).eval()
    compiled = jt.compile(model, *inputs)
    assert compiled.fallbacks == [], compiled.explain()
    _check(compiled, model, inputs)


def _check(compiled, model, inputs):
    got = compiled(*inputs)
    with torch.inference_mode():
        want = copy.deepcopy(model).double()(*[x.double() for x in inputs])
    assert got.shape == want.shape and got.dtype == torch.float32
    err = float((got.double() - want).norm() / want.norm())
    assert err <= TOL, (err, compiled.explain())


class Convolution(torch.nn.Module):
    """aten.convolution called with the exact arguments given (short lists as exported)."""

    def __init__(self, weight_shape, *args):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(weight_shape))
        self.bias = torch.nn.Parameter(torch.randn(weight_shape[0]))
        self.args = args

    def forward(self, x):
        return torch.ops.aten.convolution(x, self.weight, self.bias, *self.args)


class Resize(torch.nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x):
        return torch.nn.functional.interpolate(x, **self.options)


nn = torch.nn
FORMS = {
    "one_element_lists": lambda: Convolution((6, 4, 3, 3), [2], [1], [1], False, [0], 1),
    "mixed_lists": lambda: Convolution((6, 2, 3, 2), [2, 1], [0], [2], False, [0, 0], 2),
    "same_2d": lambda: nn.Conv2d(4, 8, (4, 3), padding="same", dilation=(1, 2)),
    "valid_grouped": lambda: nn.Conv2d(4, 8, 3, padding="valid", groups=2),
    "conv1d_same": lambda: nn.Conv1d(4, 8, 4, padding="same"),
    "conv1d_depthwise": lambda: nn.Conv1d(4, 4, 5, stride=2, padding=2, groups=4),
    "conv1d_dilated": lambda: nn.Conv1d(4, 6, 3, stride=2, padding=[2], dilation=2),
    "transposed_s2": lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
    "transposed_grouped": lambda: nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3),
                                                     padding=(0, 1), dilation=(2, 1), groups=2),
    "transposed_patch": lambda: nn.ConvTranspose2d(4, 4, 4, stride=4, bias=False),
    "transposed_cropped": lambda: nn.ConvTranspose2d(4, 3, 3, padding=2),
    "transposed_1d": lambda: nn.ConvTranspose1d(4, 6, 5, stride=3, padding=2,
                                                output_padding=2, groups=2),
    # F.interpolate, as decode heads and MobileViT resize maps (jitcore/torch/resize.py)
    "resize_bilinear": lambda: Resize(size=(13, 5), mode="bilinear"),
    "resize_bilinear_corners": lambda: Resize(size=(13, 5), mode="bilinear",
                                              align_corners=True),
    "resize_bilinear_factors": lambda: Resize(scale_factor=(1.7, 0.6), mode="bilinear"),
    "resize_nearest": lambda: Resize(scale_factor=2.5, mode="nearest"),
    "resize_nearest_size": lambda: Resize(size=(3, 11), mode="nearest"),
}


@pytest.mark.parametrize("name", FORMS)
def test_convolution_argument_forms(name):
    torch.manual_seed(0)
    model = FORMS[name]().eval()
    x = torch.randn(2, 4, 9) if "1d" in name else torch.randn(2, 4, 7, 8)
    compiled = jt.compile(model, x)
    assert compiled.fallbacks == [], compiled.explain()
    _check(compiled, model, (x,))


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_resizing_integer_images_is_exact_or_left_to_torch(mode):
    """uint8 images: nearest resizing is a gather (exact, in jitcore); torch rounds its
    bilinear fixed-point blend its own way, so that node stays in torch and says why."""
    x = torch.randint(0, 256, (1, 3, 5, 6)).to(torch.uint8)
    model = Resize(size=(7, 9), mode=mode).eval()
    compiled = jt.compile(model, x)
    assert torch.equal(compiled(x), model(x))
    if mode == "nearest":
        assert compiled.fallbacks == [], compiled.explain()
    else:
        assert "bilinear resizing of torch.uint8" in compiled.explain()
