"""torch.export's training IR lowered as exported, without the core-ATen decompositions
(jitcore/torch/training_ir.py): each op of it matches eager (float64 reference, normwise,
float32 within 64 units of roundoff); a graph with an op that has no direct lowering, an
in-place write that a later node or a view sees, or a training-mode op is decomposed as
before and matches too; explain() says which path the export took."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import jitcore.torch as jt                  # noqa: E402
from jitcore.torch import training_ir       # noqa: E402

from test_torch_frontend import assert_matches, eager, in_double   # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)
nn, F = torch.nn, torch.nn.functional
DIRECT = "export: the graph as exported (no core-ATen decomposition)"


class Fn(nn.Module):
    """forward = fn(self, *inputs), with the submodules and parameters given."""

    def __init__(self, fn, **children):
        super().__init__()
        self.fn = fn
        for name, child in children.items():
            setattr(self, name, child)

    def forward(self, *xs):
        return self.fn(self, *xs)


def _bn(c):
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


IMG = (2, 4, 9, 10)
DIRECT_CASES = {
    "conv2d": (lambda: Fn(lambda s, x: s.c(x), c=nn.Conv2d(4, 6, 3, stride=2, padding=1)), IMG),
    "conv2d_same": (lambda: Fn(lambda s, x: s.c(x), c=nn.Conv2d(4, 6, (3, 2), padding="same")),
                    IMG),
    "conv2d_valid_no_bias": (lambda: Fn(lambda s, x: s.c(x),
                                        c=nn.Conv2d(4, 8, 3, padding="valid", groups=2,
                                                    bias=False)), IMG),
    "conv1d": (lambda: Fn(lambda s, x: s.c(x), c=nn.Conv1d(4, 6, 5, stride=2, padding=2)),
               (2, 4, 17)),
    "conv1d_same": (lambda: Fn(lambda s, x: s.c(x), c=nn.Conv1d(4, 6, 4, padding="same")),
                    (2, 4, 17)),
    "batch_norm": (lambda: Fn(lambda s, x: torch.relu(s.bn(s.c(x))), c=nn.Conv2d(4, 6, 3),
                              bn=_bn(6)), IMG),
    "linear_3d": (lambda: Fn(lambda s, x: s.l(x), l=nn.Linear(10, 7)), (2, 5, 10)),
    "linear_2d_no_bias": (lambda: Fn(lambda s, x: s.l(x), l=nn.Linear(10, 7, bias=False)),
                          (5, 10)),
    "linear_1d": (lambda: Fn(lambda s, x: s.l(x), l=nn.Linear(10, 7)), (10,)),
    "matmul_batched": (lambda: Fn(lambda s, x: x @ x.transpose(-1, -2)), (2, 3, 5, 4)),
    "pad_constant": (lambda: Fn(lambda s, x: F.pad(x, (1, 2, 0, 3), value=0.5)), IMG),
    "layer_norm": (lambda: Fn(lambda s, x: s.n(x), n=nn.LayerNorm((5, 10))), (2, 5, 10)),
    "group_norm": (lambda: Fn(lambda s, x: s.n(x), n=nn.GroupNorm(2, 4)), IMG),
    "dropout": (lambda: Fn(lambda s, x: s.d(x) * 2, d=nn.Dropout(0.3)), (3, 8)),
    "softmax": (lambda: Fn(lambda s, x: torch.softmax(x, dim=1)), (3, 8, 5)),
    "max_pool2d": (lambda: Fn(lambda s, x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True)), IMG),
    "adaptive_avg_pool2d": (lambda: Fn(lambda s, x: F.adaptive_avg_pool2d(x, (3, 2))), IMG),
    "flatten_reshape_as": (lambda: Fn(lambda s, x: torch.flatten(x, 1).reshape_as(x) + 1), IMG),
    "contiguous_channels_last": (lambda: Fn(lambda s, x: x.contiguous(
        memory_format=torch.channels_last) * 3), IMG),
    "attention": (lambda: Fn(lambda s, x: F.scaled_dot_product_attention(x, x * 0.5, x + 1)),
                  (2, 3, 6, 4)),
    "attention_causal_scaled": (lambda: Fn(lambda s, x: F.scaled_dot_product_attention(
        x, x * 0.5, x + 1, is_causal=True, scale=0.3)), (2, 3, 6, 4)),
    "attention_3d": (lambda: Fn(lambda s, x: F.scaled_dot_product_attention(x, x * 0.5, x + 1)),
                     (3, 6, 4)),
    "attention_2d": (lambda: Fn(lambda s, x: F.scaled_dot_product_attention(x, x * 0.5, x + 1)),
                     (6, 4)),
    "attention_causal_fewer_queries": (lambda: Fn(lambda s, x: F.scaled_dot_product_attention(
        x[:, :, :3], x * 0.5, x + 1, is_causal=True)), (2, 2, 6, 4)),
    "attention_bool_mask": (lambda: Fn(_attention_masked, m=_Mask(torch.bool)), (2, 3, 6, 4)),
    "attention_float_mask": (lambda: Fn(_attention_masked, m=_Mask(torch.float32)),
                             (2, 3, 6, 4)),
    "to_dtype": (lambda: Fn(lambda s, x: x.to(torch.float64) * 3 + 1), (3, 8)),
    "type_as": (lambda: Fn(lambda s, x: (x > 0).type_as(x) * x), (3, 8)),
    # in-place writes no one else sees become their out-of-place twins
    "residual_add_": (lambda: Fn(_residual, c=nn.Conv2d(4, 4, 3, padding=1), bn=_bn(4)), IMG),
    "read_then_write": (lambda: Fn(_read_then_write), (3, 8)),
    # (export hands later reads of h the written node, not h's first one)
    "write_then_read": (lambda: Fn(_write_then_read), (3, 8)),
}


def _residual(s, x):
    h = s.bn(s.c(x))
    h += x
    return torch.relu_(h)


def _read_then_write(s, x):
    h = x * 2
    g = h + 1                     # reads h before the write: sees the old value
    h.add_(3)
    return g * h


class _Mask(nn.Module):
    """A constant attention mask (6 queries x 6 keys) with one row masked whole: torch gives
    that row zeros."""

    def __init__(self, dtype):
        super().__init__()
        keep = torch.rand(6, 6, generator=torch.Generator().manual_seed(3)) > 0.3
        keep[2] = False
        self.register_buffer("mask", keep if dtype == torch.bool else
                             torch.where(keep, 0.25, -torch.inf))


def _attention_masked(s, x):
    return F.scaled_dot_product_attention(x, x * 0.5, x + 1, attn_mask=s.m.mask)


DECOMPOSED_CASES = {
    "attention_gqa": (lambda: Fn(lambda s, x: F.scaled_dot_product_attention(
        x, x[:, :1] * 0.5, x[:, :1] + 1, enable_gqa=True)), (2, 3, 6, 4)),
    # a later node reads the written tensor through a view of it
    "view_sees_write": (lambda: Fn(_view_sees_write), (3, 8)),
    "pad_reflect": (lambda: Fn(lambda s, x: F.pad(x, (2, 1, 1, 2), mode="reflect")), IMG),
    "softmax_dtype": (lambda: Fn(lambda s, x: torch.softmax(x, dim=-1, dtype=torch.float64)),
                      (3, 8)),
    "no_direct_lowering": (lambda: Fn(lambda s, x: torch.diff(x, dim=-1) * 2), (3, 8)),
}


def _view_sees_write(s, x):
    h = x * 2
    v = h.view(24)
    h.add_(1)
    return v * 3


def _write_then_read(s, x):
    h = x * 2
    h.mul_(3)
    return h + x


def _compile_and_check(make, shape):
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    compiled = jt.compile(model, x)
    assert compiled.fallbacks == [], compiled.explain()
    assert_matches(compiled(x), eager(model, x), in_double(model, x))
    return compiled


@pytest.mark.parametrize("name", DIRECT_CASES)
def test_training_ir_op_lowers_as_exported(name):
    compiled = _compile_and_check(*DIRECT_CASES[name])
    assert DIRECT in compiled.explain().splitlines()


@pytest.mark.parametrize("name", DECOMPOSED_CASES)
def test_graphs_the_direct_path_cannot_take_are_decomposed(name):
    compiled = _compile_and_check(*DECOMPOSED_CASES[name])
    line = next(ln for ln in compiled.explain().splitlines() if ln.startswith("export:"))
    assert line.startswith("export: core-ATen decompositions ("), line


def test_training_mode_ops_are_left_to_the_decompositions():
    """F.batch_norm(training=True) and F.dropout(training=True) in a module's eval form:
    the direct lowerings refuse them (the decompositions decide what they become)."""
    def fn(s, x):
        return F.batch_norm(x, None, None, training=True) + F.dropout(x, 0.0, training=True)
    model = Fn(fn).eval()
    ep = torch.export.export(model, (torch.randn(*IMG),))
    why = training_ir.why_decompose(ep.graph_module, {"xs_0"})
    assert why is not None and "training mode" in why or "running statistics" in why, why


def test_attention_dropout_is_left_to_the_decompositions():
    model = Fn(lambda s, x: F.scaled_dot_product_attention(x, x, x, dropout_p=0.2)).eval()
    ep = torch.export.export(model, (torch.randn(2, 3, 6, 4),))
    assert training_ir.why_decompose(ep.graph_module, {"xs_0"}) == \
        "aten.scaled_dot_product_attention.default: attention dropout"


def test_nodes_of_constants_alone_need_no_lowering():
    """A mask built from aten.arange (no direct lowering) folds in torch: the graph still
    lowers as exported."""
    def fn(s, x):
        pos = torch.arange(8)
        return x * (pos[None, :] < 5)
    compiled = _compile_and_check(lambda: Fn(fn), (3, 8))
    assert DIRECT in compiled.explain().splitlines()


def test_an_input_written_in_place_is_still_refused():
    """A forward that writes its input must not compile into a function that forgets it."""
    model = Fn(lambda s, x: x.add_(1) * 2)
    with pytest.raises(TypeError, match="writes its input"):
        jt.compile(model, torch.randn(3, 4))
