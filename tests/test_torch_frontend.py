"""jitcore.torch: nn.Modules through torch.export into jitcore graphs, checked against eager torch.

Accuracy: every float output is compared with the module run eagerly in float64 (a deep copy
in double, float inputs in double), normwise: |got - ref| / |ref| within ULPS units of
roundoff of the output's dtype (2**-24 for float32, 2**-53 for float64). The models reach
2e-7 to 9e-7 (4-15 units) in float32; a bug such as a wrong eps, an ignored softmax axis or a
float64 op computed in float32 costs 1e-4 or 1e-8 and fails. Integer and bool outputs equal
eager's exactly; dtypes and shapes are eager's. Fallback nodes are counted, inputs are read
in place, and torch.compile's backend works. Models are small (2 layers, hidden 64) so the
file runs in seconds.
"""
from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import jitcore as jc                        # noqa: E402
import jitcore.torch as jt                  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)
UNIT = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}
ULPS = 64                # normwise error allowed, in units of the output dtype's roundoff


def rel_err(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / max(float(want.norm()), 1e-300))


def in_double(module, *args):
    """The float64 reference: a deep copy of the module in double, float inputs in double."""
    m64 = copy.deepcopy(module).double()
    return eager(m64, *[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point()
                        else a for a in args])


def assert_matches(got, want, ref, ulps=ULPS):
    """`got` has `want`'s (eager, same dtypes) structure, shapes and dtypes; float values are
    within `ulps` units of roundoff of the float64 reference `ref`, the rest equal want's."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype,
                                                                      want.shape, want.dtype)
        if want.dtype.is_floating_point:
            finite = torch.isfinite(ref)                 # NaN and inf where the reference has
            assert torch.equal(got.isnan(), ref.isnan())
            assert torch.equal(got[ref.isinf()].double(), ref[ref.isinf()].double())
            err = rel_err(got[finite], ref[finite])
            assert err <= ulps * UNIT[want.dtype], (err, err / UNIT[want.dtype])
        else:
            assert torch.equal(got, want)
        return
    assert type(got) is type(want) or isinstance(got, (tuple, list))
    # (a dict's values; torch.return_types.max has a `values` field: a tuple)
    items, gots, refs = ([*v.values()] if isinstance(v, dict) else list(v)
                         for v in (want, got, ref))
    assert len(gots) == len(items) == len(refs)
    for g, w, r in zip(gots, items, refs):
        assert_matches(g, w, r, ulps)


def check(compiled, module, *args, ulps=ULPS):
    """The compiled module's outputs for args against eager's and the float64 reference."""
    assert_matches(compiled(*args), eager(module, *args), in_double(module, *args), ulps)


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
    check(c, m, x)
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
    assert_matches(second, eager(m, x), in_double(m, x))
    assert rel_err(first, second) > 1e-3
    y = torch.randn(4, 64)
    out = c(y)
    assert out.data_ptr() == out.numpy().ctypes.data         # wraps the array jitcore wrote
    assert_matches(out, eager(m, y), in_double(m, y))


def test_non_contiguous_input_is_read_through_its_strides():
    m = MLP(layers=1)
    x = torch.randn(64, 8).t()                               # a transposed view
    c = jt.compile(m, x)
    check(c, m, x)


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
            outs += self.non_default_arguments(a, b)
        else:
            outs += [a // 2, a % 3, a & b, a | b, a ^ b, ~a, a.to(torch.float32) / 2]
        return tuple(outs)

    @staticmethod
    def non_default_arguments(a, b):
        """Each float lowering with the arguments a default would hide (an ignored `dim`,
        eps, slope or bound computes the default and fails)."""
        f = torch.nn.functional
        w, bias = torch.linspace(0.5, 1.5, 5, dtype=a.dtype), torch.linspace(-1, 1, 5,
                                                                            dtype=a.dtype)
        small = a * 0.05                                  # a variance eps competes with
        return [torch.softmax(a, 0), torch.softmax(a, 1), torch.log_softmax(a, 0),
                torch.log_softmax(a, -1), f.layer_norm(small, (5,), w, bias, eps=1e-2),
                f.layer_norm(small, (3, 5), eps=3e-3), f.gelu(a), f.leaky_relu(a, 0.3),
                f.hardtanh(a, -0.3, 0.7), torch.clamp(a, min=-0.2), torch.clamp(a, max=0.4),
                torch.clamp(a, b - 0.1, b + 0.1), a.var(dim=(0, 2), correction=0),
                a.var(dim=-1, keepdim=True, correction=2), a.sum(dim=1, dtype=torch.float64),
                a.mean(dim=(0, 2), keepdim=True), a.amax(dim=(0, 1), keepdim=True),
                a.amin(dim=-1, keepdim=True), a.argmax(dim=2, keepdim=True),
                a.argmin(dim=0, keepdim=True), torch.any(a > 0.5, dim=-1, keepdim=True),
                torch.div(a, b, rounding_mode="floor"), torch.addmm(a[0, :, :3], a[1], b[0].T,
                                                                    beta=0.5, alpha=2.0),
                torch.remainder(a, 0.7), torch.floor_divide(a, 0.7), (a.abs() + 0.1) ** b, 2.0 ** a,
                a[:, -2:, 1:-1:2], a.select(-1, -2), a.transpose(-1, 0),
                a.unsqueeze(-1).expand(-1, -1, -1, 2), torch.where(a > 0, 0.5, -0.5),
                torch.where(a > 0, a, -1.5), torch.full_like(a, 0.25) * a]


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
    check(c, m, a, b)


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_aten_ops_whose_jitcore_op_exists_are_lowered(dtype):
    g = torch.Generator().manual_seed(7)
    a, b = (torch.randn(3, 4, generator=g, dtype=dtype) * s for s in (3, 1))
    a[0, 1], a[1, 2], a[2, 0], a[2, 3] = float("nan"), float("inf"), -0.0, 2.5
    i = torch.randint(-3, 5, (3, 4), generator=g)
    m = Lowered()
    c = jt.compile(m, a, b, i)
    assert c.fallbacks == [], c.explain()
    check(c, m, a, b, i)


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
    check(c, Ufunc(fn), x)


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
    check(c, BigFull(), x)


def test_constant_mask_building_is_folded():
    x = torch.randn(2, 6, 6)
    m = Masks()
    c = jt.compile(m, x)
    assert c.fallbacks == []
    assert c._program.folded >= 3                  # arange, compare... ran at compile time
    assert "arange" not in c.graph()
    check(c, m, x)


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
    check(c, Flip(), x)


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
    check(d, m, x2)
    check(d, m, x)


def test_torch_compile_backend():
    torch.manual_seed(0)
    m, x = MLP(), torch.randn(8, 64)
    torch._dynamo.reset()
    before = jc.cache_info()["compiles"]
    compiled = torch.compile(m, backend="jitcore")
    with torch.inference_mode():
        got = compiled(x)
    assert jc.cache_info()["compiles"] > before          # jitcore compiled the graph
    assert_matches(got, eager(m, x), in_double(m, x))
    with torch.no_grad():
        check(compiled, m, x)
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
    assert c.fallbacks == [], c.explain()
    check(c, m, ids)
    check(c, m, torch.randint(0, 500, (1, 16)))


# ---- convolutions, pooling, joins and gathers ----------------------------------------------
class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8, eps=1e-2)
        self.dw = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.nn.functional.max_pool2d(x, 3, 2, 1)
        x = torch.nn.functional.relu6(self.dw(x))
        x = torch.nn.functional.avg_pool2d(x, 2) + 0
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def test_conv_net_compiles_without_fallback():
    torch.manual_seed(0)
    m = ConvNet().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.05, 0.2)               # eps=1e-2 matters next to these
    x = torch.randn(1, 3, 16, 16)
    c = jt.compile(m, x)
    assert c.fallbacks == [], c.explain()
    check(c, m, x)


class ConvOptions(torch.nn.Module):
    """Convolution and pooling lowerings with their non-default arguments."""

    def __init__(self):
        super().__init__()
        self.dilated = torch.nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(2, 1),
                                       dilation=(2, 1), groups=2)
        self.line = torch.nn.Conv1d(4, 3, 3, stride=2, padding=2, dilation=2)

    def forward(self, x):
        f = torch.nn.functional
        y = self.dilated(x)
        return (y, f.max_pool2d(x, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2),
                                ceil_mode=True),
                f.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                             count_include_pad=False),
                f.avg_pool2d(x, (2, 3), stride=(1, 2)), f.adaptive_avg_pool2d(y, (2, 3)),
                self.line(x.flatten(2)),
                f.batch_norm(x, *(torch.linspace(lo, hi, 4, dtype=x.dtype) for lo, hi in
                                  ((-1, 1), (0.01, 0.1), (0.5, 2), (-1, 1))), eps=0.05))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_conv_and_pool_lowerings_with_their_arguments(dtype):
    torch.manual_seed(2)
    m = ConvOptions().to(dtype).eval()
    x = torch.randn(2, 4, 9, 8, dtype=dtype)
    c = jt.compile(m, x)
    assert c.fallbacks == [], c.explain()
    check(c, m, x)


class Joins(torch.nn.Module):
    def forward(self, x, ids):
        return (torch.cat([x, x * 2], dim=1), torch.cat([x, x], dim=-2),
                torch.cumsum(x, dim=1), torch.cumsum(x, dim=0, dtype=torch.float64),
                torch.nn.functional.pad(x, (1, 2)),
                torch.nn.functional.pad(x, (0, 1, 2, 0), value=-3.5), x[ids], x[:, ids],
                x.index_select(0, ids), x.index_select(-1, ids))


def test_joins_and_gathers_compile_without_fallback():
    x, ids = torch.randn(4, 5), torch.tensor([3, 0, 0, 2])
    c = jt.compile(Joins(), x, ids)
    assert c.fallbacks == [], c.explain()
    check(c, Joins(), x, ids)


class Gathers(torch.nn.Module):
    def forward(self, x, i, j, k):
        return (torch.gather(x, 1, i), torch.gather(x, 0, j), torch.gather(x, -1, i[:, :2]),
                torch.gather(x, 1, k), torch.gather(i, 1, i))


def test_gather_compiles_without_fallback():
    """aten.gather (RoBERTa's token-type ids) as one take: every axis, an index smaller
    than x on the other axes, an empty index, an integer x; NaN and inf gathered as they
    are; an index out of range raises IndexError, as torch's gather does."""
    x = torch.randn(4, 5)
    x[1, 2], x[3, 4] = float("nan"), float("inf")
    i, j = torch.tensor([[2, 0, 4, 4, 1, 3, 2], [1, 1, 0, 2, 3, 4, 0], [4, 3, 2, 1, 0, 0, 1]]), \
        torch.tensor([[3, 0, 1, 2, 3], [1, 1, 0, 0, 2]])
    k = torch.zeros(3, 0, dtype=torch.long)
    c = jt.compile(Gathers(), x, i, j, k)
    assert c.fallbacks == [], c.explain()
    check(c, Gathers(), x, i, j, k)
    for bad in (5, -1):
        i_bad = i.clone()
        i_bad[2, 6] = bad
        with pytest.raises(IndexError):
            c(x, i_bad, j, k)


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
            check(compiled, m, x)
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
    check(c, ViewsAroundFallback(), x)


class Attention(torch.nn.Module):
    def __init__(self, causal, mask, scale=None):
        super().__init__()
        self.causal, self.scale = causal, scale
        self.register_buffer("mask", mask)            # (a buffer: double() converts it)

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=self.mask, is_causal=self.causal, scale=self.scale)


@pytest.mark.parametrize("causal,mask,scale", [(False, None, None), (True, None, None),
                                               (False, "bool", None), (False, "float", 0.3),
                                               (True, None, 1.7)])
def test_scaled_dot_product_attention(causal, mask, scale):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(3))
    masks = {None: None, "bool": torch.rand(8, 8, generator=g) > 0.3,
             "float": torch.randn(8, 8, generator=g)}
    m = Attention(causal, masks[mask], scale)
    c = jt.compile(m, q, k, v)
    assert c.fallbacks == []
    check(c, m, q, k, v)


class FoldedWeights(torch.nn.Module):
    """Constants folded three ways: a transposed view of a parameter (read as a GEMM's B), a
    reshaped view (read elementwise) and a fresh result (2 * a parameter)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(48, 64))
        self.v = torch.nn.Parameter(torch.randn(48))

    def forward(self, x):
        y = x @ self.w.t() + self.v.reshape(1, 48)
        return y * (self.v * 2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_folded_constants_are_the_weights_read_at_compile_time(dtype):
    """A folded view of a parameter is copied, a fresh folded result held as it is
    (ConstArray.owned): writing the parameters after compiling changes nothing."""
    torch.manual_seed(0)
    m, x = FoldedWeights().to(dtype), torch.randn(5, 64, dtype=dtype)
    c = jt.compile(m, x)
    assert c.fallbacks == [] and c._program.folded >= 2
    want, ref = eager(m, x), in_double(m, x)
    assert_matches(c(x), want, ref)
    with torch.no_grad():
        m.w.mul_(-3.0)
        m.v.add_(1.0)
    assert_matches(c(x), want, ref)
    assert rel_err(eager(m, x), want) > 1e-2                  # the module did change


def test_bf16_precision_runs_the_matmuls_in_bf16():
    """precision="bf16" (jitcore.torch.compile, and torch.compile's options): the linears
    multiply bf16-rounded operands, so the error against float64 is that of bf16 (above
    2^-14 normwise, far from float32's 2^-22), no larger than torch autocast's on the same
    model and input (autocast also rounds the activations between layers), and the two entry
    points agree; without the option the model stays float32."""
    torch.manual_seed(0)
    m, x = MLP(width=256, layers=2), torch.randn(32, 256)
    ref = in_double(m, x)
    with torch.inference_mode():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = eager(m, x).float()
        got = jt.compile(m, x, precision="bf16")(x)
        torch._dynamo.reset()
        backend = torch.compile(m, backend="jitcore", options={"precision": "bf16"})(x)
        torch._dynamo.reset()
    err = rel_err(got, ref)
    assert 2.0 ** -14 < err <= rel_err(autocast, ref), (err, rel_err(autocast, ref))
    assert torch.equal(got, backend)
    check(jt.compile(m, x), m, x)
    with pytest.raises(jc.JitcoreError, match="matmul_precision"):
        jt.compile(m, x, precision="fp8")
