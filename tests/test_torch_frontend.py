"""jitcore.torch: nn.Modules through torch.export into jitcore graphs, checked against eager torch.

Outputs match eager within 1e-4 relative (normwise, float64 eager as the reference where it
matters), fallback nodes are counted, inputs are read in place, and torch.compile's backend
works. Models are small (2 layers, hidden 64) so the file runs in seconds.
"""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import jitcore as jc                        # noqa: E402
import jitcore.torch as jt                  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)
RTOL = 1e-4


def rel_err(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / max(float(want.norm()), 1e-30))


def assert_matches(got, want, rtol=RTOL):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype,
                                                                      want.shape, want.dtype)
        if want.dtype.is_floating_point:
            assert rel_err(got, want) <= rtol
        else:
            assert torch.equal(got, want)
        return
    assert type(got) is type(want) or isinstance(got, (tuple, list))
    items = list(want.values()) if hasattr(want, "values") else list(want)
    gots = list(got.values()) if hasattr(got, "values") else list(got)
    assert len(gots) == len(items)
    for g, w in zip(gots, items):
        assert_matches(g, w, rtol)


def eager(module, *args):
    with torch.inference_mode():
        return module.eval()(*args)


class MLP(torch.nn.Module):
    """Linear + GELU layers and a layer norm (the benchmark's MLP, smaller)."""

    def __init__(self, width=64, layers=3, approximate="none"):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.approximate = approximate

    def forward(self, x):
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x), approximate=self.approximate)
        return self.norm(x)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_mlp_matches_eager_in_one_part_without_fallback(approximate):
    torch.manual_seed(0)
    m, x = MLP(approximate=approximate), torch.randn(8, 64)
    c = jt.compile(m, x)
    assert c.fallbacks == []
    assert len(c._program.parts) == 1
    assert_matches(c(x), eager(m, x))
    kernels = c.kernels()
    assert any(k.kind == "gemm" for k in kernels)
    assert "0 fallback node(s)" in c.explain()
    assert "prepacked" in c.explain()                 # weights are constants, packed


def test_inputs_are_read_in_place_and_outputs_wrap_without_copy():
    torch.manual_seed(0)
    m, x = MLP(layers=1), torch.randn(4, 64)
    c = jt.compile(m, x)
    first = c(x)
    part = c._program.part_modules()[0]
    assert part.example[0].ctypes.data == x.data_ptr()      # the kernel read x's memory
    x.mul_(2.0)                                              # modified in place: seen
    second = c(x)
    assert_matches(second, eager(m, x))
    assert rel_err(first, second) > 1e-3
    y = torch.randn(4, 64)
    out = c(y)
    assert out.data_ptr() == out.numpy().ctypes.data         # wraps the array jitcore wrote
    assert_matches(out, eager(m, y))


def test_non_contiguous_input_is_read_through_its_strides():
    m = MLP(layers=1)
    x = torch.randn(64, 8).t()                               # a transposed view
    c = jt.compile(m, x)
    assert_matches(c(x), eager(m, x))


class AllOps(torch.nn.Module):
    """Many lowerings at once, returned as a tuple (one export per dtype)."""

    def forward(self, a, b):
        f = a.float()
        outs = [a + b, a - b, a * b, a + 2, a * 3, a - 1, torch.maximum(a, b),
                torch.minimum(a, b), a == b, a < b, a >= b, a != 1, torch.where(a > b, a, b),
                a.sum(dim=1), a.sum(dim=(0, 2), keepdim=True), a.amax(dim=-1), a.amin(dim=0),
                a.permute(2, 0, 1), a.transpose(0, 1).reshape(-1), a[:, 1], a[1:, :, ::2],
                a.unsqueeze(1).expand(2, 3, 3, 5), f / 3, torch.clamp(f, -0.5, 0.5),
                a.sum(), a.argmax(dim=1), a.argmin(dim=-1), torch.any(a > 0, dim=1),
                torch.div(a, 3, rounding_mode="floor"), torch.logical_and(a > 0, b > 0),
                torch.logical_or(a > 0, b > 0), a.split([1, 2], dim=1)[1] * 2,
                torch.ones_like(a) + a, torch.zeros_like(a) - a, torch.add(a, b, alpha=2),
                torch.sub(a, b, alpha=3)]
        if a.dtype.is_floating_point:
            outs += [a / b, a ** 2, torch.exp(a), torch.tanh(a), torch.relu(a),
                     torch.sigmoid(a), torch.rsqrt(a.abs() + 1), torch.sqrt(a.abs()),
                     torch.nn.functional.hardtanh(a), torch.nn.functional.relu6(a),
                     torch.nn.functional.silu(a), torch.nn.functional.hardswish(a),
                     torch.nn.functional.leaky_relu(a, 0.2), torch.erf(a), torch.sin(a),
                     torch.softmax(a, -1), torch.log_softmax(a, 1), a.mean(dim=(1, 2)),
                     torch.nn.functional.layer_norm(a, (3, 5)), a.var(dim=1), a.neg(),
                     torch.bmm(a, b.transpose(1, 2)), a.floor(), a.to(torch.int64),
                     torch.nn.functional.hardsigmoid(a), a.mean(), a.ceil(), a.cos(),
                     torch.reciprocal(a.abs() + 1), torch.nn.functional.gelu(a, approximate="tanh")]
        else:
            outs += [a // 2, a % 3, a & b, a | b, a ^ b, ~a, a.to(torch.float32) / 2]
        return tuple(outs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_lowering_family_matches_eager(dtype):
    g = torch.Generator().manual_seed(1)
    if dtype.is_floating_point:
        a, b = (torch.randn(2, 3, 5, generator=g, dtype=dtype) for _ in range(2))
    else:
        a, b = (torch.randint(-4, 5, (2, 3, 5), generator=g, dtype=dtype) for _ in range(2))
    m = AllOps()
    c = jt.compile(m, a, b)
    assert c.fallbacks == [], c.explain()
    assert_matches(c(a, b), eager(m, a, b))


class Lowered(torch.nn.Module):
    """ATen ops whose jitcore op exists, lowered since issue 27 (they ran in torch)."""

    def forward(self, a, b, i):
        return (torch.isnan(a), torch.isinf(a), torch.signbit(a), torch.atan2(a, b),
                torch.atan2(i, i + 1), torch.hypot(a, b), torch.logaddexp(a, b),
                torch.copysign(a, b), torch.copysign(a, -1.0), torch.fmax(a, b),
                torch.fmin(a, b), torch.round(a * 2), torch.log10(a.abs()), torch.sinh(a),
                torch.cosh(a), torch.asin(a / 4), torch.acos(a / 4), torch.asinh(a),
                torch.acosh(a.abs() + 1), torch.atanh(a / 4), torch.logical_xor(a > 0, b > 0),
                a.prod(), a.prod(dim=1), a.max(dim=1), a.min(dim=0, keepdim=True), a.max(),
                a.min(), i.prod(dim=0), i.max(dim=1), a.index_select(1, torch.tensor([3, 0])),
                i << 3, i >> 1, i << 70, i >> 70, torch.bitwise_left_shift(i, i.abs()),
                torch.bitwise_right_shift(i, 2))


def test_aten_ops_whose_jitcore_op_exists_are_lowered():
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(3, 4, generator=g) * 3, torch.randn(3, 4, generator=g)
    a[0, 1], a[1, 2], a[2, 0], a[2, 3] = float("nan"), float("inf"), -0.0, 2.5
    i = torch.randint(-3, 5, (3, 4), generator=g)
    m = Lowered()
    c = jt.compile(m, a, b, i)
    assert c.fallbacks == [], c.explain()
    want = torch.utils._pytree.tree_leaves(eager(m, a, b, i))
    for k, (got, w) in enumerate(zip(torch.utils._pytree.tree_leaves(c(a, b, i)), want)):
        assert got.dtype == w.dtype and got.shape == w.shape, k
        if w.dtype.is_floating_point:
            torch.testing.assert_close(got, w, rtol=1e-6, atol=0, equal_nan=True, msg=str(k))
        else:
            assert torch.equal(got, w), k


UFUNCS = [("log1p", torch.log1p), ("expm1", torch.expm1), ("sign", torch.sign),
          ("log2", torch.log2), ("exp2", torch.exp2), ("tan", torch.tan), ("arctan", torch.atan),
          ("round", torch.round), ("trunc", torch.trunc)]


class Ufunc(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x.abs() + 0.1) * self.fn(x.abs() * 3.0 + 0.3)    # in every domain


@pytest.mark.parametrize("name,fn", UFUNCS, ids=[u[0] for u in UFUNCS])
def test_ufuncs_of_the_tracing_branch(name, fn):
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(4))
    c = jt.compile(Ufunc(fn), x)
    ops = {f[1] for f in c.fallbacks}
    if name == "tan":                                 # jitcore has no tan: it runs in torch
        assert ops == {"aten.tan.default"} and "needs jc.tan" in c.explain()
    else:
        assert ops == set()
    assert_matches(c(x), eager(Ufunc(fn), x))


class Masks(torch.nn.Module):
    """Mask building from constants (folded at compile time) and bool logic at run time."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x):
        n = x.shape[-1]
        causal = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
        s = torch.where(causal, x * self.scale, torch.full_like(x, float("-inf")))
        p = torch.softmax(s, dim=-1)
        dead = torch.logical_not((s != float("-inf")).any(dim=-1, keepdim=True))
        return torch.where(dead, torch.zeros_like(p), p), (x > 0) & causal


class BigFull(torch.nn.Module):
    def forward(self, x):
        return x + torch.full((1100, 1024), 2.0)        # too large to fold: a lowered full


def test_a_constant_too_large_to_fold_is_computed():
    x = torch.randn(1024)
    c = jt.compile(BigFull(), x)
    assert c.fallbacks == [] and c._program.folded == 0
    assert_matches(c(x), eager(BigFull(), x))


def test_constant_mask_building_is_folded():
    x = torch.randn(2, 6, 6)
    m = Masks()
    c = jt.compile(m, x)
    assert c.fallbacks == []
    assert c._program.folded >= 3                  # arange, compare... ran at compile time
    assert "arange" not in c.graph()
    assert_matches(c(x), eager(m, x))


class Flip(torch.nn.Module):
    def forward(self, x):
        return torch.relu(torch.flip(x * 2.0, dims=[1]) + 1.0)


def test_unsupported_op_falls_back_and_explain_lists_it():
    x = torch.randn(3, 7)
    c = jt.compile(Flip(), x)
    assert [f[1] for f in c.fallbacks] == ["aten.flip.default"]
    assert "no jitcore lowering" in c.explain()
    assert "aten.flip.default" in c.explain()
    assert len(c._program.parts) == 2              # before and after the flip
    assert_matches(c(x), eager(Flip(), x))


def test_torch_threads_follow_jitcore_when_parts_fall_back():
    x = torch.randn(3, 7)
    c = jt.compile(Flip(), x)
    before_jc, before_torch = jc.get_num_threads(), torch.get_num_threads()
    try:
        jc.set_num_threads(1)
        torch.set_num_threads(2)
        c(x)
        assert torch.get_num_threads() == 1
    finally:
        jc.set_num_threads(before_jc)
        torch.set_num_threads(before_torch)


def test_static_shapes_refuse_a_new_shape_dynamic_recompiles():
    m = MLP(layers=1)
    x, x2 = torch.randn(4, 64), torch.randn(6, 64)
    c = jt.compile(m, x)
    with pytest.raises(jc.ShapeError, match="dynamic=True"):
        c(x2)
    with pytest.raises(jc.DTypeError):
        c(x.double())
    d = jt.compile(m, x, dynamic=True)
    assert_matches(d(x2), eager(m, x2))
    assert_matches(d(x), eager(m, x))


def test_torch_compile_backend():
    torch.manual_seed(0)
    m, x = MLP(), torch.randn(8, 64)
    torch._dynamo.reset()
    before = jc.cache_info()["compiles"]
    compiled = torch.compile(m, backend="jitcore")
    with torch.inference_mode():
        got = compiled(x)
    assert jc.cache_info()["compiles"] > before          # jitcore compiled the graph
    assert_matches(got, eager(m, x))
    with torch.no_grad():
        assert_matches(compiled(x), eager(m, x))
    torch._dynamo.reset()


# ---- transformers models (small configs) -------------------------------------------------------
def _bert():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=128, vocab_size=500)
    return transformers.BertModel(cfg)


class GPT2(torch.nn.Module):
    """GPT2Model without the KV cache, returning the last hidden state."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids, use_cache=False).last_hidden_state


def _gpt2():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=2, vocab_size=500,
                                  n_positions=64)
    return GPT2(transformers.GPT2Model(cfg))


@pytest.mark.parametrize("make", [_bert, _gpt2], ids=["bert", "gpt2"])
def test_transformer_matches_eager(make):
    torch.manual_seed(0)
    m = make().eval()
    ids = torch.randint(0, 500, (1, 16))
    c = jt.compile(m, ids)
    want = eager(m, ids)
    assert_matches(c(ids), want)
    ids2 = torch.randint(0, 500, (1, 16))
    assert_matches(c(ids2), eager(m, ids2))
    ops = {f[1] for f in c.fallbacks}
    if hasattr(jc, "take"):
        assert ops == set(), c.explain()
    else:                                          # embeddings wait for jc.take
        assert ops == {"aten.embedding.default"}, c.explain()


# ---- lowerings whose jitcore ops come from other branches --------------------------------------
class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.nn.functional.max_pool2d(x, 3, 2, 1)
        x = torch.nn.functional.relu6(self.dw(x))
        x = torch.nn.functional.avg_pool2d(x, 2) + 0
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def test_conv_net_matches_eager_and_falls_back_only_on_missing_ops():
    torch.manual_seed(0)
    m = ConvNet().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 16, 16)
    c = jt.compile(m, x)
    assert_matches(c(x), eager(m, x))
    needed = {"aten.convolution.default": "conv2d",
              "aten._native_batch_norm_legit_no_training.default": "batch_norm",
              "aten.max_pool2d_with_indices.default": "max_pool2d",
              "aten.avg_pool2d.default": "avg_pool2d",
              "aten._adaptive_avg_pool2d.default": "adaptive_avg_pool2d"}
    for node, op, why in c.fallbacks:
        assert op in needed and not hasattr(jc, needed[op]), (op, why)


@pytest.mark.skipif(not all(hasattr(jc, n) for n in ("conv2d", "batch_norm", "max_pool2d",
                                                       "avg_pool2d", "adaptive_avg_pool2d")),
                    reason="needs jc.conv2d, batch_norm and the pools (other branches)")
def test_conv_net_compiles_without_fallback():
    m = ConvNet().eval()
    x = torch.randn(1, 3, 16, 16)
    c = jt.compile(m, x)
    assert c.fallbacks == []
    assert_matches(c(x), eager(m, x))


class Joins(torch.nn.Module):
    def forward(self, x, ids):
        return (torch.cat([x, x * 2], dim=1), torch.cumsum(x, dim=1),
                torch.nn.functional.pad(x, (1, 2)), x[ids], x.index_select(0, ids))


@pytest.mark.skipif(not all(hasattr(jc, n) for n in ("concatenate", "cumsum", "pad", "take")),
                    reason="needs jc.concatenate, cumsum, pad and take (other branches)")
def test_joins_and_gathers_compile_without_fallback():
    x, ids = torch.randn(4, 5), torch.tensor([3, 0, 0, 2])
    c = jt.compile(Joins(), x, ids)
    assert {f[1] for f in c.fallbacks} <= {"aten.index_select.default"}
    assert_matches(c(x, ids), eager(Joins(), x, ids))


def test_import_jitcore_does_not_import_torch():
    import subprocess
    import sys
    code = "import sys, jitcore; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


class Buffered(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("shift", torch.arange(8.0))

    def forward(self, x):
        return torch.relu(self.lin(x) + self.shift)


def test_torch_compile_backend_binds_parameters_and_buffers_as_constants():
    from jitcore.torch import backend
    m, x = Buffered().eval(), torch.randn(4, 8)
    torch._dynamo.reset()
    seen = []
    original = backend.CompiledModule

    class Spy(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(self)
    backend.CompiledModule = Spy
    try:
        compiled = torch.compile(m, backend="jitcore")
        with torch.inference_mode():
            assert_matches(compiled(x), eager(m, x))
    finally:
        backend.CompiledModule = original
        torch._dynamo.reset()
    assert len(seen) == 1
    assert len(seen[0]._constant_inputs) == 3          # weight, bias, shift
    assert len(seen[0]._program.signature) == 1        # x is the only run-time input


class ViewsAroundFallback(torch.nn.Module):
    def forward(self, x):
        y = torch.flip(x.view(2, 6).t(), dims=[0])      # views, then an op jitcore lacks
        return torch.exp(y) * 2.0


def test_a_part_of_views_alone_stays_in_torch():
    x = torch.randn(3, 4)
    c = jt.compile(ViewsAroundFallback(), x)
    assert len(c._program.parts) == 1                    # exp * 2; the views run in torch
    assert [f[1] for f in c.fallbacks] == ["aten.flip.default"]
    assert "views left in torch" in c.explain()
    assert_matches(c(x), eager(ViewsAroundFallback(), x))


class Attention(torch.nn.Module):
    def __init__(self, causal, mask):
        super().__init__()
        self.causal, self.mask = causal, mask

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=self.mask, is_causal=self.causal)


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "bool"),
                                         (False, "float")])
def test_scaled_dot_product_attention(causal, mask):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(3))
    masks = {None: None, "bool": torch.rand(8, 8, generator=g) > 0.3,
             "float": torch.randn(8, 8, generator=g)}
    m = Attention(causal, masks[mask])
    c = jt.compile(m, q, k, v)
    assert c.fallbacks == []
    assert_matches(c(q, k, v), eager(m, q, k, v))
