"""jitcore.torch.compile(..., dynamic=True) where the model computes with its sizes: SymInt
arithmetic, arange and masks from a length, causal attention, reflect padding, and tiny HF
BERT, GPT-2 and LLaMA over many sequence lengths, against float64 eager with compile counts.

A size torch computes reaches a part as a run-time Size (never a placeholder number) and
leaves it as a Python scalar; parts vary along the axes torch.export made symbolic.
"""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import jitcore as jc  # noqa: E402
import jitcore.torch as jt  # noqa: E402

LENGTHS = [8, 5, 9, 16, 3, 33, 12, 2, 7, 20]       # primes, sizes around the vector width


def compiles() -> int:
    return jc.cache_info()["compiles"]


def _close(got, module, x, dtype=torch.float32):
    """Normwise error of the compiled float32 module against the module in float64."""
    ref = module.double()(x.double() if x.is_floating_point() else x)
    module.float()
    ref = getattr(ref, "last_hidden_state", ref)
    got = getattr(got, "last_hidden_state", got)
    err = float((got.double() - ref).norm() / max(float(ref.norm()), 1e-30))
    assert err < 2e-6, err


class CausalAttention(torch.nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q * 0.5, q.flip(-1), is_causal=True)


class LengthMask(torch.nn.Module):
    """A lower-triangular mask, an arange table and a scale, all built from T."""

    def forward(self, x):
        T, D = x.shape[1], x.shape[-1]
        mask = torch.ones(T, T, dtype=x.dtype).tril()
        pos = torch.arange(T, dtype=x.dtype)[None, :, None]
        return (mask @ x) * D ** -0.5 + pos / T


class ReflectConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")

    def forward(self, x):
        return self.conv(x)


@pytest.mark.parametrize("make,shape,per_length", [
    (CausalAttention, lambda T: (2, 2, T, 8), 0),
    (LengthMask, lambda T: (2, T, 4), 0),
    (ReflectConv, lambda T: (1, 3, T, 6), 1),            # convolutions compile per shape
])
def test_size_patterns_compile_once_and_match_eager(make, shape, per_length):
    torch.manual_seed(0)
    m = make().eval()
    c = jt.compile(m, torch.randn(*shape(LENGTHS[0])), dynamic=True)
    before = compiles()
    with torch.no_grad():
        for T in LENGTHS[:5]:
            x = torch.randn(*shape(T))
            _close(c(x), m, x)
    assert compiles() - before <= per_length * 5, compiles() - before
    assert "1099511" not in c.explain()


def _bert():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, vocab_size=100)
    return transformers.BertModel(cfg), 2


def _gpt2():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100,
                                  use_cache=False, n_positions=64)
    return transformers.GPT2Model(cfg), 1


def _llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                                   use_cache=False, max_position_embeddings=64)
    return transformers.LlamaModel(cfg), 1


@pytest.mark.parametrize("make", [_bert, _gpt2, _llama], ids=["bert", "gpt2", "llama"])
def test_hf_models_over_sequence_lengths(make):
    """The encoder/decoder layers compile once for every length; what still compiles per
    length is a small part (a slice of the position table by T, the causal mask's
    cumsum/concat), at most two per new length. Results match float64 eager."""
    torch.manual_seed(0)
    m, batch = make()
    m = m.eval()
    c = jt.compile(m, torch.randint(0, 100, (batch, LENGTHS[0])), dynamic=True)
    before = compiles()
    with torch.no_grad():
        for T in LENGTHS[:3]:
            ids = torch.randint(0, 100, (batch, T))
            _close(c(ids), m, ids)
    new = len(set(LENGTHS[:3]) - {LENGTHS[0]})
    assert compiles() - before <= 2 * new, (compiles() - before, new)
    text = c.explain()
    biggest = max(text.split("== ")[1:], key=len)       # the part with the layers
    assert "run-time extents" in biggest.splitlines()[1], biggest[:600]


@pytest.mark.parametrize("dynamic", [False, True])
def test_parts_follow_the_dynamic_argument(dynamic):
    """Each part is jc.jit(dynamic=...) as compile was asked (partition once passed its list
    of run-time inputs where the flag goes, so every part with an input was dynamic)."""
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
    c = jt.compile(m, torch.randn(4, 8), dynamic=dynamic)
    parts = c._program.part_modules()
    assert parts and all(pm.part.dynamic is dynamic for pm in parts)


class StarArgs(torch.nn.Module):
    def forward(self, x, *rest):
        return x.sum(0) + sum(r.sum(0) for r in rest)


def test_var_positional_forward_exports_with_dynamic_extents():
    """A forward(x, *rest) (a decode step's cache prefixes): export binds the tensors
    collected by *rest to one parameter, so dynamic_shapes must nest them (a flat list
    failed export and fell back to a compile per shape)."""
    m = StarArgs().eval()
    c = jt.compile(m, torch.randn(6, 4), torch.randn(6, 4), torch.randn(6, 4), dynamic=True)
    assert c._program.dynamic_note is None, c._program.dynamic_note
    before = compiles()
    for T in (3, 9, 17):
        xs = [torch.randn(T, 4) for _ in range(3)]
        torch.testing.assert_close(c(*xs), m(*xs))
    assert compiles() == before


class DecodeAttention(torch.nn.Module):
    """One new query row against a KV cache stored as `layout` (decoder.py's cache is
    [T, B, heads, dim]; "bhdt" keeps k and v transposed), with a per-position bias [B, T, 1]
    (ALiBi-like): the scores are a GEMV with T outputs, the weighted sum one with K = T, each
    in the memory order the layout gives. (The bias makes a transposed cache's last axis T
    run-time: jitcore/torch/part.py leaves a last axis static unless its symbol sizes
    another kind of axis.)"""
    ORDERS = {"tbhd": (1, 2, 0, 3), "bhdt": (0, 1, 3, 2), "bhtd": (0, 1, 2, 3)}

    def __init__(self, layout):
        super().__init__()
        self.order = self.ORDERS[layout]

    def forward(self, q, k, v, bias):      # q [B, H, 1, D]; k, v as stored; bias [B, T, 1]
        k, v = k.permute(self.order), v.permute(self.order)
        scores = q @ k.transpose(-1, -2) * 0.25 + bias.transpose(1, 2)[:, None]
        return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("layout", list(DecodeAttention.ORDERS))
def test_decode_attention_compiles_once_for_every_cache_length(layout):
    """Each cache layout's two GEMVs read the run-time T: one compile serves every cache
    length (no compile per generated token), with the bits of a per-length compile and
    eager's values (float64)."""
    module = DecodeAttention(layout)
    inverse = [DecodeAttention.ORDERS[layout].index(i) for i in range(4)]

    def args(T, seed=0):
        g = torch.Generator().manual_seed(T + seed)
        q = torch.randn(2, 4, 1, 16, generator=g)
        kv = [torch.randn(2, 4, T, 16, generator=g).permute(inverse).contiguous()
              for _ in range(2)]
        return q, *kv, torch.randn(2, T, 1, generator=g)
    c = jt.compile(module, *args(8), dynamic=True)
    before = compiles()
    for T in LENGTHS + [100, 1000]:
        a = args(T)
        got = c(*a)
        ref = module(*(x.double() for x in a))
        assert float((got.double() - ref).norm() / ref.norm()) < 2e-6, (layout, T)
        if T in (5, 33, 1000):           # the per-length compile's bits
            assert torch.equal(got, jt.compile(module, *a)(*a)), (layout, T)
        before += 1 if T in (5, 33, 1000) else 0
    assert compiles() - before <= 1, (layout, compiles() - before)
    text = c.explain()
    assert text.count("(gemv)") >= 2 or text.count("gemv") >= 2, text[-3000:]
    assert "compiled per shape" not in text
