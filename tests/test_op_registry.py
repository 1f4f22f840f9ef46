"""The op records (jitcore.ir.ops.OP_INFO), tested from the registry itself: registering an op
puts it under every test here.

- every op has a record, and its flags agree with its kind and arity;
- every elementwise primitive has an LLVM emitter, every composite a decomposition rule;
- every record's typing rule agrees with what `ir.build` gives (or refuses) for each dtype;
- every constant fold agrees with the op compiled: a one-op graph per op and dtype, run on
  sample values, against the fold computed in float64 (floats: within FOLD_ULPS units in the
  last place of the op's dtype; integers and bools: exactly).
"""
import numpy as np
import pytest

import jitcore as jc
from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import DTypeError
from jitcore.ir.ops import OP_INFO, OpKind, Op, Typing, info
from jitcore.llvm.opemit import EMITTERS
from jitcore.passes.decompose import RULES
from jitcore.ops.tracer import node_of, wrap

ELEMENTWISE = [op for op in Op if info(op).elementwise]
PRIMITIVES = [op for op in ELEMENTWISE if not info(op).composite]
REDUCTIONS = [op for op in Op if info(op).reduction]
# the arg each op with one takes (the front's defaults)
ARGS = {Op.GELU: "none", Op.LEAKY_RELU: 0.01, Op.HARDTANH: (-1.0, 1.0)}
# vecmath's worst bound is 2.31 ulp (vecmath.py), plus the rounding of the float64 reference
FOLD_ULPS = 4


def _arg(op, dtype=None):
    if info(op).reduction:
        return (0,)
    if op == Op.CAST:
        return dtype
    return ARGS.get(op)


def _sources(op, dtype, shape=(5,)):
    """Input nodes for `op` whose (value) sources have `dtype`."""
    rec = info(op)
    srcs = [build.input_node(f"x{k}", shape, dtype) for k in range(rec.arity)]
    if rec.typing is Typing.SELECT:
        srcs[0] = build.input_node("c", shape, dt.bool_)
    return srcs


@pytest.mark.parametrize("op", list(Op), ids=repr)
def test_every_op_has_a_record(op):
    rec = info(op)
    assert rec.op is op and OP_INFO[op] is rec
    assert rec.name == op.name.lower()
    assert rec.arity is None or rec.arity >= 0
    assert (rec.arity == 0) == rec.leaf
    if rec.elementwise:
        assert rec.arity in (1, 2, 3) and rec.typing is not Typing.OWN
    if rec.reduction:
        assert rec.arity == 1 and rec.typing is not Typing.OWN
        assert rec.identity is None or rec.combine is not None
    if rec.combine is not None:
        assert info(rec.combine).binary and rec.reduction
    if rec.fold is not None:
        assert rec.elementwise and not rec.composite, "only primitives fold"
    assert not rec.selects or rec.binary
    assert rec.cost >= 1


@pytest.mark.parametrize("op", ELEMENTWISE, ids=repr)
def test_elementwise_op_is_emitted_or_decomposed(op):
    if info(op).composite:
        assert op in RULES, f"composite {op!r} has no @decomposes rule"
    else:
        assert op in EMITTERS, f"elementwise primitive {op!r} has no emitter in llvm/opemit.py"


@pytest.mark.parametrize("op", [op for op in Op if info(op).composite], ids=repr)
def test_every_composite_has_a_rule(op):
    assert op in RULES


def test_rules_and_emitters_belong_to_records():
    assert all(info(op).composite for op in RULES)
    assert all(info(op).elementwise and not info(op).composite for op in EMITTERS)


@pytest.mark.parametrize("dtype", dt.ALL, ids=str)
@pytest.mark.parametrize("op", ELEMENTWISE + REDUCTIONS, ids=repr)
def test_typing_rule_agrees_with_build(op, dtype):
    rec = info(op)
    for arg in ([_arg(op, d) for d in dt.ALL] if op == Op.CAST else [_arg(op)]):
        src = _sources(op, dtype)
        if rec.typing.admits(dtype):
            out = build.node(op, *src, arg=arg)
            assert out.dtype == rec.typing.result(dtype, arg), f"{op!r}({dtype.name})"
            assert out.shape == ((1,) if rec.reduction else (5,))
        else:
            with pytest.raises(DTypeError):
                build.node(op, *src, arg=arg)


@pytest.mark.parametrize("dtype", [d for d in dt.ALL if not d.is_float], ids=str)
@pytest.mark.parametrize("op", [op for op in ELEMENTWISE if info(op).typing in
                                (Typing.FLOAT, Typing.TRUE_DIVIDE)], ids=repr)
def test_float_ops_convert_integers_first(op, dtype):
    """FLOAT and TRUE_DIVIDE take float sources only; `build.elementwise` converts integers
    (numpy: float32 for 8-bit types here, where numpy has float16; float64 for division)."""
    out = build.elementwise(op, *_sources(op, dtype), arg=_arg(op))
    want = dt.float64 if info(op).typing is Typing.TRUE_DIVIDE else dt.float_result(dtype)
    assert out.dtype == want


def _samples(op, dtype, k, rng):
    """Sample values for source k of op: inside every op's domain (positive floats, small
    integers, shift counts below the width, nonzero divisors, small exponents)."""
    n = 64
    if dtype == dt.bool_:
        return rng.random(n) < 0.5
    if dtype.is_float:
        return rng.uniform(0.25, 2.0, n).astype(dtype.np)
    if k == 1 and op in (Op.LEFT_SHIFT, Op.RIGHT_SHIFT):
        return rng.integers(0, 8, n).astype(dtype.np)
    if k == 1 and op == Op.POW:
        return rng.integers(0, 4, n).astype(dtype.np)
    low = 1 if k == 1 else 0
    return rng.integers(low, 20, n).astype(dtype.np)


def _fold_cases():
    for op in PRIMITIVES:
        rec = info(op)
        if rec.fold is None:
            continue
        for dtype in dt.ALL:
            if rec.typing.admits(dtype):
                yield op, dtype


def _compiled(op, dtype, values, arg=None):
    """The op applied by a jitted one-op graph (build.node: no promotion in between)."""
    def f(*xs):
        nodes = [node_of(x) for x in xs]
        if info(op).typing is Typing.SELECT:
            nodes[0] = build.cast(nodes[0], dt.bool_)
        return wrap(build.node(op, *nodes, arg=arg))
    return jc.jit(f)(*values)


@pytest.mark.parametrize("op, dtype", list(_fold_cases()), ids=lambda v: repr(v) if
                         isinstance(v, Op) else str(v))
def test_fold_agrees_with_compiled_code(op, dtype):
    rec = info(op)
    rng = np.random.default_rng(sum(map(ord, rec.name + dtype.name)))
    values = [_samples(op, dtype, k, rng) for k in range(rec.arity)]
    if rec.typing is Typing.SELECT:
        values[0] = rng.random(values[0].shape) < 0.5
    got = _compiled(op, dtype, values)
    out = rec.typing.result(dtype)
    assert got.dtype == out.np
    with np.errstate(all="ignore"):
        if out.is_float:
            ref = rec.fold(*[v.astype(np.float64) if v.dtype.kind == "f" else v
                             for v in values])
            ulp = np.spacing(np.abs(ref).astype(out.np)).astype(np.float64)
            err = np.abs(got.astype(np.float64) - ref)
            bad = ~(err <= FOLD_ULPS * ulp)
            assert not bad.any(), (f"{rec.name}({dtype.name}) at {values[0][bad][:4]}: got "
                                   f"{got[bad][:4]}, fold {ref[bad][:4]}")
        else:
            ref = np.asarray(rec.fold(*values)).astype(out.np)
            np.testing.assert_array_equal(got, ref, err_msg=f"{rec.name}({dtype.name})")


@pytest.mark.parametrize("target", dt.ALL, ids=str)
@pytest.mark.parametrize("source", dt.ALL, ids=str)
def test_cast_fold_agrees_with_compiled_code(source, target):
    """CAST folds with dtypes.convert (numpy's astype, saturating float -> int)."""
    rng = np.random.default_rng(7)
    x = _samples(Op.CAST, source, 0, rng)
    if source.is_float:
        x = (x - 1) * 300          # negatives and values past uint8's range
    got = _compiled(Op.CAST, source, [x], arg=target)
    np.testing.assert_array_equal(got, dt.convert(x, target))


def test_kinds_cover_the_groups():
    """The exported groups are computed from the records (no hand-kept op sets)."""
    from jitcore.ir import ops
    assert ops.ELEMENTWISE == {op for op, r in OP_INFO.items() if r.kind is OpKind.ELEMENTWISE}
    assert ops.TRANSCENDENTAL == {op for op, r in OP_INFO.items() if r.expensive}
    assert ops.REDUCE_COMBINE == {op: r.combine for op, r in OP_INFO.items() if r.combine}
