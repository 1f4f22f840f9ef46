"""The model zoo of `python -m jitcore bench --zoo`: transformers' architectures built offline
from their config classes (no download), random weights (torch.manual_seed(0)), float32, eval
mode, each wrapped to return one tensor (its last hidden state).

Widths are the config class's defaults (the family's reference checkpoint) except where that
default is a billion-parameter model's width (the decoders LLaMA, Mistral, Qwen2, Gemma, Phi,
GPT-NeoX and Falcon) or ALBERT's xxlarge: those take the widths of the family's smallest
released checkpoint (base for ALBERT; 1B-class for Mistral, which has none smaller),
named in `WIDTHS`, so that a 2-layer model runs in seconds on two cores. Text models get a
vocabulary of 1024 tokens (the embedding's size changes nothing but memory) and one sequence
of 128 tokens; vision models one image at the config's size; speech models Whisper's
3000-frame log-mel input or one second of 16 kHz audio.

Depth: `layers` transformer blocks for the plain stacks; for staged models (CNNs, Swin,
Segformer, ...) each stage keeps min(its depth, `layers`) blocks; `layers=None` is the
config's real depth (`--full`). MobileNetV1/V2 and MobileViT have a fixed depth in
transformers and always run whole. `tiny=True` shrinks every width as well (the CI test).
The table imports nothing heavy; building imports torch and transformers.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

VOCAB = 1024
SEQUENCE = 128
# the smallest released checkpoint of a family whose config default is billions of parameters
WIDTHS = {
    "albert": dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12),  # base
    "llama": dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                  num_key_value_heads=4),                       # TinyLlama-1.1B
    "mistral": dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                    num_key_value_heads=8),                     # (no small Mistral: 1B class)
    "qwen2": dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14,
                  num_key_value_heads=2),                       # Qwen2-0.5B
    "gemma": dict(hidden_size=2048, intermediate_size=16384, num_attention_heads=8,
                  num_key_value_heads=1, head_dim=256),          # Gemma-2B
    "phi": dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32),  # Phi-1.5
    "gpt_neox": dict(hidden_size=768, intermediate_size=3072,
                     num_attention_heads=12),                   # Pythia-160M
    "falcon": dict(hidden_size=2048, num_attention_heads=32, multi_query=False,
                   new_decoder_architecture=False),             # Falcon-RW-1B's width
}


@dataclass(frozen=True)
class Arch:
    name: str
    family: str                 # encoder, decoder, vision transformer, CNN, speech
    config: str                 # transformers config class
    model: str                  # transformers model class
    inputs: str                 # text, image, features (Whisper's log-mel), audio
    depth: str | None           # the config field holding the block count (a list: staged)
    tiny: dict = field(default_factory=dict)       # width overrides for the CI's tiny models
    fixed: dict = field(default_factory=dict)      # overrides that always apply


_TINY_TEXT = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2)
_TINY_DEC = dict(_TINY_TEXT, num_key_value_heads=1)
_TINY_VIT = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, image_size=32,
                 patch_size=8)
_EFFICIENTNET_B0 = dict(image_size=224, width_coefficient=1.0, depth_coefficient=1.0,
                        hidden_dim=1280)

ARCHS = [
    Arch("bert", "encoder", "BertConfig", "BertModel", "text", "num_hidden_layers", _TINY_TEXT),
    Arch("distilbert", "encoder", "DistilBertConfig", "DistilBertModel", "text", "n_layers",
         dict(dim=32, hidden_dim=64, n_heads=2)),
    Arch("roberta", "encoder", "RobertaConfig", "RobertaModel", "text", "num_hidden_layers",
         _TINY_TEXT),
    Arch("albert", "encoder", "AlbertConfig", "AlbertModel", "text", "num_hidden_layers",
         dict(_TINY_TEXT, embedding_size=16), WIDTHS["albert"]),
    Arch("electra", "encoder", "ElectraConfig", "ElectraModel", "text", "num_hidden_layers",
         dict(_TINY_TEXT, embedding_size=16)),
    Arch("deberta_v2", "encoder", "DebertaV2Config", "DebertaV2Model", "text",
         "num_hidden_layers", _TINY_TEXT),
    Arch("mpnet", "encoder", "MPNetConfig", "MPNetModel", "text", "num_hidden_layers",
         _TINY_TEXT),
    Arch("t5_encoder", "encoder", "T5Config", "T5EncoderModel", "text", "num_layers",
         dict(d_model=32, d_kv=16, d_ff=64, num_heads=2)),
    Arch("gpt2", "decoder", "GPT2Config", "GPT2Model", "text", "n_layer",
         dict(n_embd=32, n_head=2)),
    Arch("llama", "decoder", "LlamaConfig", "LlamaModel", "text", "num_hidden_layers",
         _TINY_DEC, WIDTHS["llama"]),
    Arch("mistral", "decoder", "MistralConfig", "MistralModel", "text", "num_hidden_layers",
         _TINY_DEC, WIDTHS["mistral"]),
    Arch("qwen2", "decoder", "Qwen2Config", "Qwen2Model", "text", "num_hidden_layers",
         _TINY_DEC, WIDTHS["qwen2"]),
    Arch("gemma", "decoder", "GemmaConfig", "GemmaModel", "text", "num_hidden_layers",
         dict(_TINY_DEC, head_dim=16), WIDTHS["gemma"]),
    Arch("phi", "decoder", "PhiConfig", "PhiModel", "text", "num_hidden_layers", _TINY_TEXT,
         WIDTHS["phi"]),
    Arch("opt", "decoder", "OPTConfig", "OPTModel", "text", "num_hidden_layers",
         dict(hidden_size=32, ffn_dim=64, num_attention_heads=2, word_embed_proj_dim=32)),
    Arch("gpt_neox", "decoder", "GPTNeoXConfig", "GPTNeoXModel", "text", "num_hidden_layers",
         _TINY_TEXT, WIDTHS["gpt_neox"]),
    Arch("bloom", "decoder", "BloomConfig", "BloomModel", "text", "n_layer",
         dict(hidden_size=32, n_head=2)),
    Arch("falcon", "decoder", "FalconConfig", "FalconModel", "text", "num_hidden_layers",
         dict(hidden_size=32, num_attention_heads=2), WIDTHS["falcon"]),
    Arch("vit", "vision transformer", "ViTConfig", "ViTModel", "image", "num_hidden_layers",
         _TINY_VIT),
    Arch("deit", "vision transformer", "DeiTConfig", "DeiTModel", "image", "num_hidden_layers",
         _TINY_VIT),
    Arch("beit", "vision transformer", "BeitConfig", "BeitModel", "image", "num_hidden_layers",
         _TINY_VIT),
    Arch("dinov2", "vision transformer", "Dinov2Config", "Dinov2Model", "image",
         "num_hidden_layers", dict(hidden_size=32, num_attention_heads=2, image_size=28,
                                   patch_size=14)),
    Arch("clip_vision", "vision transformer", "CLIPVisionConfig", "CLIPVisionModel", "image",
         "num_hidden_layers", _TINY_VIT),
    Arch("swin", "vision transformer", "SwinConfig", "SwinModel", "image", "depths",
         dict(embed_dim=16, num_heads=[1, 2, 2, 4], image_size=64, window_size=2)),
    Arch("segformer", "vision transformer", "SegformerConfig", "SegformerModel", "image",
         "depths", dict(hidden_sizes=[8, 16, 24, 32], num_attention_heads=[1, 1, 2, 2],
                        image_size=64)),
    Arch("mobilevit", "vision transformer", "MobileViTConfig", "MobileViTModel", "image", None,
         dict(hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
              image_size=64)),
    Arch("levit", "vision transformer", "LevitConfig", "LevitModel", "image", "depths",
         dict(hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3], key_dim=[8, 8, 8],
              image_size=64)),
    Arch("resnet", "CNN", "ResNetConfig", "ResNetModel", "image", "depths",
         dict(embedding_size=8, hidden_sizes=[8, 16, 24, 32], image_size=32)),
    Arch("mobilenet_v1", "CNN", "MobileNetV1Config", "MobileNetV1Model", "image", None,
         dict(depth_multiplier=0.25, image_size=32)),
    Arch("mobilenet_v2", "CNN", "MobileNetV2Config", "MobileNetV2Model", "image", None,
         dict(depth_multiplier=0.25, image_size=32)),
    Arch("efficientnet_b0", "CNN", "EfficientNetConfig", "EfficientNetModel", "image",
         "num_block_repeats", dict(image_size=32, width_coefficient=0.25, hidden_dim=320),
         _EFFICIENTNET_B0),
    Arch("convnext", "CNN", "ConvNextConfig", "ConvNextModel", "image", "depths",
         dict(hidden_sizes=[8, 16, 24, 32], image_size=32)),
    Arch("convnext_v2", "CNN", "ConvNextV2Config", "ConvNextV2Model", "image", "depths",
         dict(hidden_sizes=[8, 16, 24, 32], image_size=32)),
    Arch("regnet", "CNN", "RegNetConfig", "RegNetModel", "image", "depths",
         dict(embedding_size=8, hidden_sizes=[8, 16, 24, 32], groups_width=8, image_size=32)),
    Arch("poolformer", "CNN", "PoolFormerConfig", "PoolFormerModel", "image", "depths",
         dict(hidden_sizes=[8, 16, 24, 32], image_size=32)),
    Arch("whisper_encoder", "speech", "WhisperConfig", "WhisperModel", "features",
         "encoder_layers", dict(d_model=32, encoder_attention_heads=2, decoder_attention_heads=2,
                                encoder_ffn_dim=64, num_mel_bins=16, max_source_positions=32)),
    Arch("wav2vec2", "speech", "Wav2Vec2Config", "Wav2Vec2Model", "audio", "num_hidden_layers",
         dict(_TINY_TEXT, conv_dim=[16] * 7, num_conv_pos_embeddings=16)),
    Arch("hubert", "speech", "HubertConfig", "HubertModel", "audio", "num_hidden_layers",
         dict(_TINY_TEXT, conv_dim=[16] * 7, num_conv_pos_embeddings=16)),
]
BY_NAME = {a.name: a for a in ARCHS}
NAMES = tuple(BY_NAME)


def config(arch: Arch, layers: int | None, tiny: bool = False):
    """The architecture's config: defaults, then `fixed`, `tiny`'s widths, the depth."""
    import transformers
    cls = getattr(transformers, arch.config)
    cfg = cls(**{**arch.fixed, **(arch.tiny if tiny else {})})
    if hasattr(cfg, "vocab_size") and arch.inputs == "text":
        cfg.vocab_size = VOCAB
    if arch.name == "efficientnet_b0" and tiny:
        cfg.num_block_repeats = [1] * len(cfg.num_block_repeats)
    if arch.depth is not None and layers is not None:
        real = getattr(cfg, arch.depth)
        setattr(cfg, arch.depth, [min(d, layers) for d in real] if isinstance(real, (list, tuple))
                else min(real, layers))
    if tiny and hasattr(cfg, "max_position_embeddings") and arch.inputs == "text":
        cfg.max_position_embeddings = max(cfg.max_position_embeddings or 0, SEQUENCE)
    return cfg


def _model(arch: Arch, cfg):
    import transformers
    from .models import Output
    model = getattr(transformers, arch.model)(cfg)
    if arch.name == "whisper_encoder":
        model = model.get_encoder()
    kwargs = {"use_cache": False} if arch.family == "decoder" else {}
    return Output(model, "last_hidden_state", **kwargs)


def _inputs(arch: Arch, cfg, tiny: bool) -> tuple:
    import torch
    g = torch.Generator().manual_seed(1)
    if arch.inputs == "text":
        return (torch.randint(0, cfg.vocab_size, (1, 16 if tiny else SEQUENCE), generator=g),)
    if arch.inputs == "image":
        size = getattr(cfg, "image_size", 224)        # (ResNet's, RegNet's config: none)
        size = size if isinstance(size, int) else size[0]
        return (torch.randn(1, getattr(cfg, "num_channels", 3), size, size, generator=g),)
    if arch.inputs == "features":              # Whisper checks for 2 frames per position
        return (torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g),)
    return (torch.randn(1, 1600 if tiny else 16000, generator=g),)     # 16 kHz audio


def randomize_norms(model):
    """Batch-norm statistics and layer scales away from their 0/1/1e-6 initial values, so a
    wrong fold (or a block whose branch a 1e-6 scale hides) shows in the output."""
    import torch
    from torch import nn
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            for attr in ("layer_scale_parameter", "layer_scale_1", "layer_scale_2", "lambda_1",
                         "lambda_2", "gamma"):
                scale = getattr(m, attr, None)
                if isinstance(scale, nn.Parameter) and scale.dim() == 1:
                    scale.copy_(torch.rand(scale.shape, generator=g) + 0.5)
    return model


def build(name: str, layers: int | None = 2, tiny: bool = False):
    """(module in eval mode, example inputs) of one architecture: `layers` blocks (None: the
    real depth), seeded random weights."""
    import torch
    arch = BY_NAME[name]
    cfg = config(arch, layers, tiny)
    torch.manual_seed(0)
    module = randomize_norms(_model(arch, cfg)).eval()
    return module, _inputs(arch, cfg, tiny)


def reference(module, inputs: tuple):
    """The float64 eager output: a double copy of the module on double float inputs
    (integer inputs, token ids, as they are)."""
    import torch
    double = copy.deepcopy(module).double()
    args = tuple(x.double() if x.is_floating_point() else x for x in inputs)
    with torch.no_grad():
        return double(*args)
