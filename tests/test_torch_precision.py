"""The bf16 precision policy of jitcore.torch (jitcore/torch/precision.py, issue 30 item 3):
its bf16 ops are torch autocast's lower-precision ops on CPU, explain() says which ops of a
model are which, a module already in bf16 runs as given on the bf16 kernels, and each model
of the benchmark (tiny configs) compiled with precision="bf16" is at least as accurate
against float64 as torch autocast on the same model and inputs."""
from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jitcore as jc                                    # noqa: E402
import jitcore.torch as jt                              # noqa: E402
from jitcore.llvm import bf16                           # noqa: E402
from jitcore.passes.kernel import Kind                  # noqa: E402
from jitcore.torch import precision                     # noqa: E402

F = torch.nn.functional
M, X4, W4 = torch.randn(4, 8), torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
# one call per ATen op of BF16_OPS (float32 operands)
EXAMPLES = {
    "aten.mm.default": lambda: torch.mm(M, M.T),
    "aten.addmm.default": lambda: torch.addmm(M[:, :4], M, M.T),
    "aten.bmm.default": lambda: torch.bmm(M[None], M.T[None]),
    "aten.baddbmm.default": lambda: torch.baddbmm(M[None, :, :4], M[None], M.T[None]),
    "aten.linear.default": lambda: F.linear(M, M),
    "aten.matmul.default": lambda: torch.matmul(M, M.T),
    "aten.scaled_dot_product_attention.default":
        lambda: F.scaled_dot_product_attention(M[None], M[None], M[None]),
    # (core ATen's spelling of conv1d/2d/3d after export's decomposition: autocast casts
    # at those, before they decompose; aten.convolution called directly is not cast)
    "aten.convolution.default": lambda: F.conv2d(X4, W4, stride=2),
    "aten.conv1d.default": lambda: F.conv1d(X4[:, :, 0], W4[:, :, 0]),
    "aten.conv2d.default": lambda: F.conv2d(X4, W4),
    "aten.conv3d.default": lambda: F.conv3d(X4[:, :, None], W4[:, :, None]),
}


def rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def float64_output(module, inputs):
    with torch.inference_mode():
        return copy.deepcopy(module).double()(
            *(x.double() if x.is_floating_point() else x for x in inputs))


def test_bf16_ops_are_autocasts_lower_precision_ops():
    """Every op the policy computes in bf16 returns bf16 under CPU autocast (the reference),
    and softmax's and layer norm's float32 computation is jitcore's own choice: autocast
    keeps them in its inputs' dtype."""
    assert set(EXAMPLES) == set(precision.BF16_OPS)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for name, call in EXAMPLES.items():
            assert call().dtype == torch.bfloat16, name
        assert F.softmax(M, -1).dtype == torch.float32       # (no bf16 operand: as given)
    for name in ("aten._softmax.default", "aten.layer_norm.default", "aten.sum.dim_IntList",
                 "aten.gelu.default", "aten.add.Tensor"):
        assert precision.classify(name) == "fp32", name


def test_classify_follows_the_kernel_kinds():
    """An op is bf16 exactly when bf16.apply has a kernel kind for it: the matmuls and the
    convolutions, not depthwise ones (memory-bound: kept float32)."""
    assert {Kind.GEMM, Kind.CONV} <= bf16.KINDS and Kind.DEPTHWISE not in bf16.KINDS
    for name in ("aten.linear.default", "aten.addmm.default", "aten.conv2d.default",
                 "aten.convolution.default"):
        assert precision.classify(name) == "bf16", name
    assert precision.classify("aten.conv2d.default", is_depthwise=True) == "fp32-kept"


class MLP(torch.nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.a, self.b = torch.nn.Linear(width, width), torch.nn.Linear(width, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        return self.norm(self.b(F.gelu(self.a(x))))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = torch.nn.Conv2d(16, 32, 3), torch.nn.Linear(32, 4)
        self.dw = torch.nn.Conv2d(32, 32, 3, groups=32)

    def forward(self, x):
        return self.fc(F.relu(self.dw(F.relu(self.conv(x)))).mean((2, 3)))


def test_explain_says_which_ops_are_bf16():
    torch.manual_seed(0)
    m, x = ConvNet().eval(), torch.randn(2, 16, 10, 10)
    c = jt.compile(m, x, precision="bf16")
    note = [line for line in c.explain().splitlines() if line.startswith("precision bf16")]
    assert len(note) == 1 and "accumulation: conv2d x1, linear x1;" in note[0], note
    assert note[0].endswith("memory-bound): conv2d (depthwise) x1"), note
    with torch.inference_mode():
        assert rel_err(c(x), m(x)) <= 2.0 ** -6              # (bf16: about 2^-8)
    assert "precision bf16" not in jt.compile(m, x).explain()      # float32: no such line


def test_bf16_module_runs_as_given_on_the_bf16_kernels():
    """model.to(bfloat16) with no precision given: the matmuls take the bf16 kernels
    (vdpbf16ps where the CPU has AVX512_BF16), whose products of bf16 operands are exact as
    the slow float32 path's (precision="fp32"): results within a bf16 rounding of it, at
    least as accurate as eager bf16 against the float32 module run in float64."""
    torch.manual_seed(0)
    m32, x32 = MLP().eval(), torch.randn(16, 64)
    m, x = copy.deepcopy(m32).to(torch.bfloat16), x32.to(torch.bfloat16)
    ref = float64_output(m, (x,))
    with torch.inference_mode():
        eager = m(x)
        c = jt.compile(m, x)
        got, slow = c(x), jt.compile(m, x, precision="fp32")(x)
    assert c.precision == bf16.BF16 and got.dtype == torch.bfloat16
    assert precision.resolve(None, m32) is None                   # float32 module: the setting
    assert precision.resolve("fp32", m) == bf16.FP32               # asked for: as asked
    text = c.explain()
    if bf16.native(jc.targetinfo.select_target(target="native")):
        assert text.count("bf16 operands in pairs (vdpbf16ps)") == 2, text
    assert rel_err(got, slow) <= 2.0 ** -8
    assert rel_err(got, ref) <= rel_err(eager, ref) * 1.05


def _bench_models():
    from jitcore.bench.models import MODELS
    return [m.name for m in MODELS]


@pytest.mark.parametrize("name", _bench_models())
def test_bench_model_bf16_is_as_accurate_as_autocast(name):
    """Each model of `bench --models` (tiny): precision="bf16" against float64 no worse than
    torch autocast's bf16 on the same model and inputs, and within bf16's reach (above
    float32's error: the bf16 matmuls did run)."""
    from jitcore.bench.models import BY_NAME, build
    needs = BY_NAME[name].needs
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{needs} is not installed")
    module, inputs = build(name, tiny=True)
    ref = float64_output(module, inputs)
    with torch.inference_mode():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = module(*inputs)
        got = jt.compile(module, *inputs, precision="bf16")(*inputs)
    err, err_autocast = rel_err(got, ref), rel_err(autocast, ref)
    assert got.dtype == torch.float32 and np.isfinite(err)
    assert 1e-6 < err <= err_autocast, (err, err_autocast)
