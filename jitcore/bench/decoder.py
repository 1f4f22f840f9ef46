"""A LLaMA-style decoder that generates with a KV cache: transformers' LlamaForCausalLM
(built offline from a LlamaConfig, seeded random weights) split into a prefill module and a
decode-step module that share its weights, and the greedy loop that owns the cache.

The cache of each layer is one preallocated tensor per k and v, time-major:
`[max_len, batch, kv_heads, head_dim]`. Time-major makes the filled prefix `cache[:T]` a
C-contiguous view whose leading extent T is a run-time size, so one `dynamic=True` compile
of the step serves every cache length and reads the cache in place (a head-major
`[batch, heads, max_len, dim]` prefix is a strided view, compiled per length).

The step is a pure function: it reads the prefix views and returns the new token's logits
and its k/v rows; the loop writes those rows into `cache[T]` (one row per layer, in place:
the cache is never copied or reallocated). The step's attention merges the past and the new
token without a concatenation along T (a run-time axis): softmax over [past, new] computed
from the two score blocks' common maximum, as flash-decoding merges its splits.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# the bench's model: LLaMA's shape at hidden 1024 (TinyLlama's head_dim 64 and its 4:1
# grouped kv heads), 2 layers; a vocabulary as the zoo's (the lm_head is one more GEMV)
CONFIG = dict(hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
              num_key_value_heads=4, num_hidden_layers=2, vocab_size=1024,
              max_position_embeddings=512)


def llama_shape(hidden: int) -> dict:
    """CONFIG at another width: LLaMA's proportions (head_dim 64, 4 query heads per kv head,
    an intermediate of 2.75x hidden rounded to 256)."""
    heads = max(hidden // 64, 1)
    return dict(CONFIG, hidden_size=hidden, num_attention_heads=heads,
                num_key_value_heads=max(heads // 4, 1),
                intermediate_size=256 * round(2.75 * hidden / 256))


TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, num_hidden_layers=2, vocab_size=128,
            max_position_embeddings=256)


def build(config: dict | None = None, seed: int = 0):
    """LlamaForCausalLM from a LlamaConfig (no download), seeded random weights, eval mode."""
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(**(config or CONFIG), use_cache=True)
    cfg._attn_implementation = "eager"
    return transformers.LlamaForCausalLM(cfg).eval()


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Layers(torch.nn.Module):
    """What prefill and step share: the model's modules and the per-layer projections."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        cfg = lm.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.groups = self.heads // self.kv_heads

    def qkv(self, layer, x, cos, sin):
        """q [B, kv_heads, groups * S, dim] (scaled, grouped by the kv head it reads), k and
        v [B, kv_heads, S, dim], rotary applied."""
        B, S, _ = x.shape
        att = layer.self_attn
        q = att.q_proj(x).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k = att.k_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        v = att.v_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]
        q = (q * cos + _rotate_half(q) * sin) * att.scaling
        k = k * cos + _rotate_half(k) * sin
        return q, k, v

    def finish(self, layer, h, attn):
        """The residual adds, the MLP, around an attention output [B, S, hidden]."""
        h = h + layer.self_attn.o_proj(attn)
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def logits(self, h):
        return self.lm.lm_head(self.lm.model.norm(h[:, -1]))


class Prefill(_Layers):
    """ids [B, P] -> (logits of the last position [B, vocab], then per layer k and v rows
    [P, B, kv_heads, dim]: the cache's first P rows)."""

    def forward(self, ids):
        B, P = ids.shape
        h = self.lm.model.embed_tokens(ids)
        pos = torch.arange(P, device=ids.device)[None].expand(B, P)
        cos, sin = self.lm.model.rotary_emb(h, pos)
        rows = []
        for layer in self.lm.model.layers:
            x = layer.input_layernorm(h)
            q, k, v = self.qkv(layer, x, cos, sin)
            kr = k.repeat_interleave(self.groups, dim=1)
            vr = v.repeat_interleave(self.groups, dim=1)
            o = F.scaled_dot_product_attention(q, kr, vr, is_causal=True, scale=1.0)
            h = self.finish(layer, h, o.transpose(1, 2).reshape(B, P, -1))
            rows += [k.permute(2, 0, 1, 3), v.permute(2, 0, 1, 3)]
        return (self.logits(h), *rows)


class Step(_Layers):
    """One decode step: ids [B, 1], positions [B, 1] (= T) and per layer the cache prefixes
    k, v [T, B, kv_heads, dim] -> (logits [B, vocab], per layer the new k, v rows
    [1, B, kv_heads, dim])."""

    def forward(self, ids, pos, *past):
        B = ids.shape[0]
        h = self.lm.model.embed_tokens(ids)
        cos, sin = self.lm.model.rotary_emb(h, pos)
        rows = []
        for i, layer in enumerate(self.lm.model.layers):
            x = layer.input_layernorm(h)
            q, k, v = self.qkv(layer, x, cos, sin)          # q [B, H, 1, d], k/v [B, Hkv, 1, d]
            q = q.reshape(B, self.kv_heads, self.groups, self.head_dim)
            o = attend(q, k, v, past[2 * i], past[2 * i + 1])
            h = self.finish(layer, h, o.reshape(B, 1, -1))
            rows += [k.permute(2, 0, 1, 3), v.permute(2, 0, 1, 3)]
        return (self.logits(h), *rows)


def attend(q, k, v, past_k, past_v):
    """Softmax attention of q [B, Hkv, G, d] (scaled) over the past keys [T, B, Hkv, d] and
    the new key k [B, Hkv, 1, d]: the two score blocks share one maximum, so no
    concatenation along T is needed. -> [B, Hkv, G, d]"""
    kp = past_k.permute(1, 2, 3, 0)                         # [B, Hkv, d, T]: a view
    vp = past_v.permute(1, 2, 0, 3)                         # [B, Hkv, T, d]
    s_past = q @ kp                                         # [B, Hkv, G, T]
    s_new = q @ k.transpose(-1, -2)                         # [B, Hkv, G, 1]
    m = torch.maximum(s_past.amax(-1, keepdim=True), s_new)
    e_past, e_new = torch.exp(s_past - m), torch.exp(s_new - m)
    return (e_past @ vp + e_new * v) / (e_past.sum(-1, keepdim=True) + e_new)


@dataclass
class KVCache:
    """Per layer a k and a v tensor [max_len, batch, kv_heads, dim], allocated once;
    `length` rows are filled."""
    tensors: list
    length: int = 0

    @classmethod
    def empty(cls, lm, max_len: int, batch: int = 1, dtype=torch.float32):
        cfg = lm.config
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        shape = (max_len, batch, cfg.num_key_value_heads, dim)
        return cls([torch.zeros(shape, dtype=dtype) for _ in range(2 * cfg.num_hidden_layers)])

    def prefix(self) -> list:
        """The filled rows of every tensor: views, no copy."""
        return [t[:self.length] for t in self.tensors]

    def write(self, rows) -> None:
        """Write each layer's new rows [n, B, Hkv, d] at `length` (in place) and advance."""
        n = rows[0].shape[0]
        for t, r in zip(self.tensors, rows):
            t[self.length:self.length + n].copy_(r)
        self.length += n


@dataclass
class Generation:
    tokens: list                 # the generated ids (greedy), batch 0
    logits: list                 # each step's logits [B, vocab] (when kept)
    prefill_s: float             # wall seconds of the prefill call and its cache write
    decode_s: float              # wall seconds of the decode steps
    prefill_cpu: float           # the same in CPU seconds of this process (every thread)
    decode_cpu: float


def generate(prefill, step, lm, prompt: torch.Tensor, new_tokens: int,
             keep_logits: bool = False, cache: KVCache | None = None) -> Generation:
    """Greedy generation of `new_tokens` tokens after `prompt` [B, P]: `prefill(ids)` and
    `step(ids, pos, *prefixes)` are the modules above, eager or compiled by any system."""
    B, P = prompt.shape
    cache = cache or KVCache.empty(lm, P + new_tokens, B)
    cache.length = 0
    kept = []
    with torch.inference_mode():
        t0, c0 = time.perf_counter(), time.process_time()
        logits, *rows = prefill(prompt)
        cache.write(rows)
        t1, c1 = time.perf_counter(), time.process_time()
        tokens = []
        ids = logits.argmax(-1, keepdim=True)
        for _ in range(new_tokens):
            tokens.append(int(ids[0, 0]))
            if keep_logits:
                kept.append(logits.clone())
            if len(tokens) == new_tokens:
                break
            pos = torch.full((B, 1), cache.length, dtype=torch.int64)
            logits, *rows = step(ids, pos, *cache.prefix())
            cache.write(rows)
            ids = logits.argmax(-1, keepdim=True)
        t2, c2 = time.perf_counter(), time.process_time()
    return Generation(tokens, kept, t1 - t0, t2 - t1, c1 - c0, c2 - c1)
