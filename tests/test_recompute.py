"""The recompute rule (passes/recompute.py) and temp sharing (passes/memory_plan.py): iterative
programs compute each step once, kernels stay bounded, values match float64 numpy."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import assert_close, ref_conv2d
from jitcore.ir import Op
from jitcore.ir import build as b
from jitcore.ir import dtypes as dt
from jitcore.ir.graph import Graph
from jitcore.bench import sinkhorn
from jitcore.call.signature import signature_of
from jitcore.passes import run_pipeline
from jitcore.passes.kernel import MAX_FUSED_OPS
from jitcore.passes.memory_plan import live_ranges, plan_temps
from jitcore.passes.recompute import MAX_CONE_COST, OP_COST, ROUND_TRIP_COST

# float32 Sinkhorn against float64 numpy: each normalisation divides by a sum of n positive
# terms (relative error ~ sqrt(n) eps); the iteration is contracting, so errors stay at the
# level of one step instead of adding up.
SINKHORN_RTOL = 2e-5
STEP_COUNTS = (1, 2, 7, 20)


def _traced_lowering(fn, *args, bits=512):
    """The lowered graph jc.jit would compile for fn(*args) (contiguous arrays), without
    LLVM: the compile of an 80-step program is mostly LLVM's time."""
    jf = jc.jit(fn)
    names = jf._arg_names(len(args))
    sigs = [signature_of(a, i, n) for i, (a, n) in enumerate(zip(args, names))]
    return run_pipeline(jf._trace(sigs, names), bits)


@pytest.mark.parametrize("steps", STEP_COUNTS)
@pytest.mark.parametrize("program", ["normalize", "scaling"])
@pytest.mark.parametrize("shape", [(64, 48), (33, 130)])
def test_sinkhorn_matches_float64_numpy(program, steps, shape):
    args = sinkhorn.inputs(*shape, seed=steps)[program]
    fn = sinkhorn.PROGRAMS[program](steps)
    got = jc.jit(fn)(*args)
    ref = fn(*(a.astype(np.float64) for a in args))
    assert got.dtype == np.float32
    assert_close(got, ref, np.float32, rtol=SINKHORN_RTOL, atol=0.0, msg=f"{program} {steps}")


def test_sinkhorn_with_matrix_vector_products_matches_float64_numpy():
    args = sinkhorn.inputs(40, 24, seed=3)["scaling_matmul"]
    fn = sinkhorn.scaling_matmul(6)
    got = jc.jit(fn)(*args)
    assert got.dtype == np.float32
    assert_close(got, fn(*(a.astype(np.float64) for a in args)), np.float32,
                 rtol=SINKHORN_RTOL, atol=0.0)


def _elementwise_ops(kernel) -> int:
    return sum(1 for op in kernel.ops if op not in ("sum", "max", "min", "prod", "copy"))


# the primitive ops one step of each program traces to: a sum and a divide (and, in the
# scaling form, the broadcast product that is summed)
OPS_PER_STEP = {"normalize": 2, "scaling": 3}


@pytest.mark.parametrize("program", list(OPS_PER_STEP))
def test_sinkhorn_kernels_grow_linearly_and_stay_bounded(program):
    """Doubling the steps at most doubles kernels and ops (no step is recomputed by the later
    ones), and no kernel grows with the program."""
    args = sinkhorn.inputs(64)[program]
    sizes = {}
    for steps in (10, 20, 40, 80):
        kernels = _traced_lowering(sinkhorn.PROGRAMS[program](steps), *args).kernels
        sizes[steps] = (len(kernels), sum(len(k.ops) for k in kernels))
        assert max(len(k.ops) for k in kernels) <= MAX_FUSED_OPS
        assert max(_elementwise_ops(p) for k in kernels for p in (k.parts or [k])) \
            <= MAX_CONE_COST
    for steps in (20, 40, 80):
        half_kernels, half_ops = sizes[steps // 2]
        kernels, ops = sizes[steps]
        assert kernels - half_kernels <= half_kernels, sizes
        assert ops - half_ops <= half_ops, sizes
    # 40 more steps add their own ops, nothing recomputed
    assert sizes[80][1] - sizes[40][1] <= 40 * OPS_PER_STEP[program], sizes


def _chain(x, ops: int):
    for i in range(ops // 2):
        x = x * (1.0 + 1e-4 * (i % 3)) + 0.25
    return x


@pytest.mark.parametrize("readers", [3, 4, 6])
def test_long_chain_read_by_several_kernels_is_materialized_once(readers):
    reductions = [lambda y: y.sum(axis=0), lambda y: y.max(axis=1), lambda y: y.min(axis=0),
                  lambda y: y.sum(axis=1), lambda y: y.max(axis=0), lambda y: y.min(axis=1)]
    chain_ops = 60

    def f(x):
        y = _chain(x, chain_ops)
        return tuple(r(y) for r in reductions[:readers])

    x = np.random.default_rng(readers).uniform(-1, 1, (48, 80)).astype(np.float32)
    jf = jc.jit(f)
    kernels = jf.kernels(x)
    chain_kernels = [k for k in kernels if len(k.ops) > ROUND_TRIP_COST]
    assert len(chain_kernels) == 1 and chain_kernels[0].kind == "pointwise", \
        [(k.name, k.ops) for k in kernels]
    # each reader recomputes at most the cheap tail the rule allows: (readers-1)*cost <= trip
    tail = ROUND_TRIP_COST // ((readers - 1) * OP_COST)
    reducers = [k for k in kernels if k is not chain_kernels[0]]
    assert len(reducers) == readers
    assert all(len(k.ops) - 1 <= tail for k in reducers), [k.ops for k in reducers]
    ref = f(x.astype(np.float64))
    for got, want in zip(jf(x), ref):
        assert_close(got, want, np.float32, rtol=1e-5, atol=1e-5)


def _readers_graph(readers: int, chain_ops: int):
    """x -> a chain of `chain_ops` muls and adds -> `readers` sums of differently scaled
    copies (each its own kernel)."""
    x = b.input_node("x", (16, 128), dt.float32)
    y = x
    for i in range(chain_ops):
        y = b.elementwise(Op.ADD if i % 2 else Op.MUL, y, b.const(1.5, dt.float32))
    outs = [b.reduce(Op.SUM, b.elementwise(Op.MUL, y, b.const(k + 2.0, dt.float32)), (k % 2,))
            for k in range(readers)]
    return Graph("t", [x], outs)


@pytest.mark.parametrize("chain_ops", [1, 2, 3])
@pytest.mark.parametrize("readers", [2, 3, 5, 7, 12])
def test_a_value_is_materialized_exactly_when_recomputing_it_costs_more_than_a_round_trip(
        readers, chain_ops):
    lowered = run_pipeline(_readers_graph(readers, chain_ops), 512)
    temps = {st.buffer.slot for k in lowered.kernels for st in k.stores
             if st.buffer.kind == "temp"}
    recompute = (readers - 1) * chain_ops * OP_COST
    assert (len(temps) == 1) == (recompute > ROUND_TRIP_COST), \
        [(k.name, k.ops) for k in lowered.kernels]


def test_a_long_chain_is_cut_into_bounded_kernels():
    def f(x):
        return _chain(x, 2000).sum()

    x = np.linspace(-1, 1, 100, dtype=np.float32)
    jf = jc.jit(f)
    kernels = jf.kernels(x)
    assert max(len(k.ops) for k in kernels) <= MAX_FUSED_OPS
    assert sum(len(k.ops) for k in kernels) <= 2000 + 2 * len(kernels)   # nothing recomputed
    np.testing.assert_allclose(jf(x), f(x.astype(np.float64)), rtol=1e-4)


def _plans(lowered):
    plan = plan_temps(lowered)
    ranges = live_ranges(lowered)
    return plan, ranges


@pytest.mark.parametrize("steps", [4, 20, 80])
def test_sinkhorn_temps_share_a_few_blocks(steps):
    lowered = _traced_lowering(sinkhorn.normalize(steps), *sinkhorn.inputs(32)["normalize"])
    plan, ranges = _plans(lowered)
    _assert_no_live_overlap(lowered, plan, ranges)
    matrix = 32 * 32 * 4
    # the materialized steps ping-pong between a few matrix-sized blocks, however many steps
    assert sum(size for size in plan.sizes if size >= matrix) <= 3 * matrix


def _assert_no_live_overlap(lowered, plan, ranges):
    nbytes = {buf.slot: buf.nbytes for buf in lowered.buffers}
    for s, block in plan.block_of.items():
        assert plan.sizes[block] >= nbytes[s]
        for t, other in plan.block_of.items():
            if s < t and block == other:
                (a0, a1), (b0, b1) = ranges[s], ranges[t]
                assert a1 < b0 or b1 < a0, (s, t, ranges[s], ranges[t])


def test_temps_of_a_forked_task_are_never_shared():
    def compute_z(x, w):
        return jc.tanh(x @ w).sum(axis=1, keepdims=True) * 2.0

    def f(x, w_y, w_z):
        fut = jc.fork(compute_z, x, w_z)
        y = jc.relu(x @ w_y).sum(axis=1, keepdims=True) + 1.0
        return y + jc.wait(fut)

    rng = np.random.default_rng(1)
    x, w_y, w_z = (rng.standard_normal(s).astype(np.float32)
                   for s in ((32, 16), (16, 24), (16, 24)))
    jf = jc.jit(f)
    lowered = _traced_lowering(f, x, w_y, w_z)
    plan, ranges = _plans(lowered)
    _assert_no_live_overlap(lowered, plan, ranges)
    task_slots = {buf.slot for k in lowered.kernels if k.task is not None
                  for buf in k.buffers() if buf.kind == "temp"}
    for s in task_slots:
        assert sum(block == plan.block_of[s] for block in plan.block_of.values()) == 1
    got = jf(x, w_y, w_z)
    x64, wy64, wz64 = (a.astype(np.float64) for a in (x, w_y, w_z))
    want = (np.maximum(x64 @ wy64, 0).sum(axis=1, keepdims=True) + 1.0
            + np.tanh(x64 @ wz64).sum(axis=1, keepdims=True) * 2.0)
    assert_close(got, want, np.float32, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("program", sorted(sinkhorn.NUMPY_PEERS))
def test_the_numpy_peers_compute_the_same_plan(program):
    """The benchmark's numpy peers (in place, BLAS products) are the same algorithm."""
    args = sinkhorn.inputs(40, 33, dtype=np.float64)[program]
    for steps in (1, 2, 7):
        np.testing.assert_allclose(sinkhorn.NUMPY_PEERS[program](steps)(*args),
                                   sinkhorn.PROGRAMS[program](steps)(*args), rtol=1e-12)


@pytest.mark.parametrize("groups", [1, 32])
def test_a_costly_value_is_stored_at_the_end_of_its_chain(groups):
    """silu(conv) read by a mean and a product (EfficientNet's squeeze-excitation): the
    sigmoid inside silu costs more than a round trip for its two readers; storing silu's
    product instead (its chain's end, read by the same kernels) lets the conv write silu as
    its epilogue. Two kernels, not a conv, a sigmoid and the rest; against float64."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 32 // groups, 3, 3)).astype(np.float32) / 3

    def f(x):
        s = jc.silu(jc.conv2d(x, w, padding=1, groups=groups))
        return s * jc.sigmoid(jc.mean(s, axis=(2, 3), keepdims=True))
    x = rng.standard_normal((1, 32, 20, 20)).astype(np.float32)
    jf = jc.jit(f)
    got = jf(x)
    kernels = jf.kernels(x)
    assert len(kernels) == 2, [k.name for k in kernels]
    assert "sigmoid" in kernels[0].ops and kernels[0].kind in ("conv", "depthwise")
    conv, _ = ref_conv2d(x, w, padding=1, groups=groups)
    s = conv / (1 + np.exp(-conv))
    want = s / (1 + np.exp(-s.mean(axis=(2, 3), keepdims=True)))
    assert_close(got, want, np.float32, rtol=1e-5, atol=1e-5 * np.abs(s).max())
