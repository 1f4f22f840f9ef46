"""Passes without LLVM: decomposition, simplification, lowering decisions, legality reasons."""
from jitcore.ir import Op
from jitcore.ir import build as b
from jitcore.ir import dtypes as dt
from jitcore.ir.graph import Graph
from jitcore.passes import run_pipeline
from jitcore.passes.kernel import walk
from jitcore.passes.symbolic import Var, lin


def _kernels(outputs, inputs, strides=None, bits=512):
    return run_pipeline(Graph("t", inputs, outputs), bits, strides).kernels


def _parts(kernels):
    """Kernels with row-fused ones expanded into their parts."""
    return [p for k in kernels for p in (k.parts or [k])]


def test_symbolic_reshape_round_trip_simplifies_to_plain_index():
    i, j, k = Var("i", 4), Var("j", 6), Var("k", 24)
    e = lin(i) * 6 + lin(j)
    assert repr(e // 6) == "i" and repr(e % 6) == "j"
    assert repr((lin(k) // 6) * 6 + lin(k) % 6) == "k"


def test_symbolic_flattened_index_of_three_and_four_dims_folds_back():
    """The C-order index of a flattened (4, 5, 6) or (2, 3, 4, 5) array, written as reshape
    writes it, is the flat variable again (nested divisions fold: (n // 6) // 5 == n // 30)."""
    n = Var("n", 120)
    assert repr((lin(n) // 30) * 30 + ((lin(n) // 6) % 5) * 6 + lin(n) % 6) == "n"
    assert repr(((lin(n) // 60) * 60 + ((lin(n) // 20) % 3) * 20 + ((lin(n) // 5) % 4) * 5
                 + lin(n) % 5)) == "n"
    assert repr((lin(n) // 6) // 5) == "(n // 30)"
    x = b.input_node("x", (4, 5, 6), dt.float32)
    (k,) = _kernels([b.elementwise(Op.NEG, b.reshape(x, (120,)))], [x])
    assert k.vectorized and k.reason is None


def test_elementwise_chain_is_one_collapsed_vector_kernel():
    x = b.input_node("x", (64, 100), dt.float32)
    y = b.elementwise(Op.MUL, b.elementwise(Op.ADD, x, b.const(1.0, dt.float32)), x)
    (k,) = _kernels([b.elementwise(Op.EXP, y)], [x])
    assert k.kind == "pointwise" and len(k.loops) == 1 and k.loops[0].var.extent == 6400
    assert k.vectorized and k.lanes == 16 and k.reason is None


def test_lanes_follow_the_widest_dtype_and_the_width():
    x = b.input_node("x", (1000,), dt.float64)
    (k,) = _kernels([b.elementwise(Op.NEG, x)], [x])
    assert k.lanes == 8
    (k,) = _kernels([b.elementwise(Op.NEG, x)], [x], bits=256)
    assert k.lanes == 4


def test_transposed_input_is_vectorized_through_tiles():
    x = b.input_node("x", (64, 32), dt.float32)
    (k,) = _kernels([b.elementwise(Op.EXP, x)], [x], {"x": (1, 64)})
    assert k.vectorized and k.tile_var is not None and k.lanes == 16


def test_strided_input_without_a_unit_stride_loop_falls_back_with_a_reason():
    x = b.input_node("x", (64, 32), dt.float32)
    (k,) = _kernels([b.elementwise(Op.EXP, x)], [x], {"x": (2, 128)})
    assert not k.vectorized and k.reason == "non_contiguous_load"


def test_column_sum_vectorizes_across_the_inner_axis():
    x = b.input_node("x", (64, 32), dt.float32)
    (k,) = _kernels([b.reduce(Op.SUM, x, (0,))], [x])
    assert k.kind == "reduce_vertical" and k.vectorized


def test_row_sum_is_horizontal_and_writes_the_output_directly():
    x = b.input_node("x", (64, 32), dt.float32)
    (k,) = _kernels([b.reduce(Op.SUM, x, (1,))], [x])
    assert k.kind == "reduce_horizontal" and k.vectorized
    assert k.stores[0].buffer.kind == "output"


def _divides_per_element(k) -> list:
    """The parts of a row kernel that divide inside the row (not once per row)."""
    return [p.name for p in k.parts if len(p.loops) > 1 and "div" in p.ops]


def test_softmax_is_one_row_kernel_of_three_vector_parts():
    x = b.input_node("x", (8, 1024), dt.float32)
    (k,) = _kernels([b.node(Op.SOFTMAX, x, arg=1)], [x])
    assert k.kind == "rows" and k.vectorized and k.range_extent == 8
    # max, sum of exp, the reciprocal of the sum (one element per row), exp * reciprocal
    assert [p.kind for p in k.parts] == ["reduce_horizontal", "reduce_horizontal",
                                         "pointwise", "pointwise"]
    assert [len(p.loops) for p in k.parts] == [2, 2, 1, 2]
    assert all(p.vectorized for p in k.parts if len(p.loops) > 1)
    assert _divides_per_element(k) == []


def test_layer_norm_is_one_row_kernel():
    x = b.input_node("x", (16, 768), dt.float32)
    (k,) = _kernels([b.node(Op.LAYER_NORM, x, arg=1e-5)], [x])
    assert k.kind == "rows" and k.vectorized
    assert _divides_per_element(k) == []


def test_row_fusion_stops_at_a_vertical_reduction():
    x = b.input_node("x", (64, 32), dt.float32)
    col = b.reduce(Op.SUM, x, (0,), keepdims=True)
    ks = _kernels([b.elementwise(Op.SUB, x, col)], [x])
    assert [k.kind for k in ks] == ["reduce_vertical", "pointwise"]


def test_broadcast_expensive_producer_is_materialized_once():
    x = b.input_node("x", (64,), dt.float32)
    y = b.input_node("y", (32,), dt.float32)
    ex = b.reshape(b.elementwise(Op.EXP, x), (64, 1))
    out = b.elementwise(Op.ADD, ex, b.reshape(y, (1, 32)))
    ks = _parts(_kernels([out], [x, y]))
    assert len(ks) == 2 and "exp" in ks[0].ops and "exp" not in ks[1].ops


def test_arg_reductions_are_vector_kernels_of_either_form():
    """The reduced axis is the vector loop when it is contiguous (rows), else the output axis
    (columns); the lanes count the values, not the int64 indices stored."""
    x = b.input_node("x", (8, 100), dt.float32)
    (row,) = _kernels([b.reduce(Op.ARGMAX, x, (1,))], [x])
    (col,) = _kernels([b.reduce(Op.ARGMIN, x, (0,))], [x])
    assert row.kind == "reduce_horizontal" and col.kind == "reduce_vertical"
    for k in (row, col):
        assert k.vectorized and k.reason is None and k.lanes == k.vector_bits // 32


def test_constant_folding_and_small_powers():
    x = b.input_node("x", (100,), dt.float32)
    two = b.elementwise(Op.ADD, b.const(1.0, dt.float32), b.const(1.0, dt.float32))
    (k,) = _kernels([b.elementwise(Op.POW, x, two)], [x])
    assert "pow" not in k.ops and "mul" in k.ops


def test_integer_pow_with_tensor_exponent_stays_scalar_with_a_reason():
    x = b.input_node("x", (10,), dt.int32)
    (k,) = _kernels([b.elementwise(Op.POW, x, x)], [x])
    assert not k.vectorized and k.reason == "unsupported_op:pow"


def test_expensive_producer_read_by_three_kernels_is_computed_once():
    x = b.input_node("x", (8, 128), dt.float32)
    g = b.elementwise(Op.ERF, x)
    ks = _parts(_kernels([b.node(Op.SOFTMAX, g, arg=1)], [x]))   # max, sum, mul read erf(x)
    assert sum("erf" in k.ops for k in ks) == 1 and len(ks) == 5   # (+ 1/sum per row)


def test_softmax_exp_read_by_two_kernels_is_recomputed():
    x = b.input_node("x", (8, 128), dt.float32)
    ks = _parts(_kernels([b.node(Op.SOFTMAX, x, arg=1)], [x]))
    assert sum("exp" in k.ops for k in ks) == 2 and len(ks) == 4


def test_large_full_reductions_split_into_fixed_parallel_blocks():
    x = b.input_node("x", (100_000,), dt.float32)
    ks = _kernels([b.reduce(Op.SUM, x, (0,))], [x])
    assert ks[0].loops[0].kind == "parallel" and [k.range_extent for k in ks] == [250, 1]
    m = b.input_node("m", (512, 512), dt.float32)
    ks = _kernels([b.reduce(Op.MAX, m, (0, 1))], [m])
    assert [k.range_extent for k in ks] == [256, 1]
    # the longest axis is split, whatever its place; the partials are never split again
    t = b.input_node("t", (3, 1_000_000), dt.float32)
    ks = _kernels([b.reduce(Op.SUM, t, (0, 1))], [t])
    assert [k.range_extent for k in ks] == [250, 1]
    # a prime length: 256 blocks, and the rows left over on their own
    p = b.input_node("p", (100_003,), dt.float32)
    ks = _kernels([b.reduce(Op.SUM, p, (0,))], [p])
    assert ks[0].range_extent == 256 and len(ks) <= 4
    small = b.input_node("s", (1000,), dt.float32)
    assert len(_kernels([b.reduce(Op.SUM, small, (0,))], [small])) == 1


def test_row_fusion_of_three_dimensional_parts_runs_every_inner_loop():
    import numpy as np
    import jitcore as jc
    x = np.random.default_rng(5).standard_normal((6, 5, 33)).astype(np.float32)
    f = jc.jit(lambda x: jc.softmax(x, axis=-1) * x.sum(axis=-1, keepdims=True))
    (k,) = f.kernels(x)
    assert k.kind == "rows"
    from helpers import F32, assert_close
    a = x.astype(np.float64)
    z = np.abs(a - a.max(-1, keepdims=True))
    e = np.exp(a - a.max(-1, keepdims=True))
    soft = e / e.sum(-1, keepdims=True)
    ref = soft * a.sum(-1, keepdims=True)
    # softmax's error is relative to |x - max|, the row sum's to sum|x| (33 terms)
    scale = soft * (z + np.sqrt(33)) * np.abs(a).sum(-1, keepdims=True)
    assert_close(f(x), ref, F32, scale=scale)


def test_fused_softmax_computes_exp_once_per_element():
    from jitcore.passes.kernel import walk
    x = b.input_node("x", (8, 1000), dt.float32)
    (k,) = _kernels([b.node(Op.SOFTMAX, x, arg=1)], [x])
    exps = [sum(getattr(n, "op", None) == Op.EXP for n in walk([s.value for s in p.stores]))
            for p in k.parts]
    assert exps == [0, 1, 0, 0]       # the sum part keeps exp(x - max) in the output
    assert len(k.parts[1].stores) == 2 and k.parts[1].stores[1].buffer.kind == "output"


def test_column_sums_stream_into_the_output_and_match_numpy_exactly():
    import numpy as np
    import jitcore as jc
    m = np.random.default_rng(9).standard_normal((300, 1000)).astype(np.float32)
    f = jc.jit(lambda m: (m.sum(axis=0), m.max(axis=0)))
    s, mx = f(m)
    from helpers import F32, assert_close, assert_same
    assert_same(mx, m.max(axis=0))
    a = np.abs(m.astype(np.float64))
    assert_close(s, m.astype(np.float64).sum(axis=0), F32, scale=a.sum(axis=0) * np.sqrt(300))
    assert "vector" in f.kernels(m)[0].loop_nest


def test_outputs_sharing_a_loop_nest_are_one_vector_kernel():
    x = b.input_node("x", (64, 100), dt.float32)
    y = b.input_node("y", (64, 100), dt.float32)
    (k,) = _kernels([b.elementwise(Op.ADD, x, y), b.elementwise(Op.MUL, x, y)], [x, y])
    assert k.kind == "pointwise" and k.vectorized and len(k.stores) == 2


def test_transcendental_shared_by_pointwise_consumers_stays_in_registers():
    x = b.input_node("x", (64, 100), dt.float32)
    e = b.elementwise(Op.EXP, x)
    outs = [b.elementwise(op, e, b.const(2.0, dt.float32)) for op in (Op.ADD, Op.MUL, Op.SUB)]
    (k,) = _kernels(outs, [x])
    exps = [n for n in walk([s.value for s in k.stores]) if getattr(n, "op", None) == Op.EXP]
    assert k.vectorized and len(exps) == 1
    assert all(buf.kind != "temp" for buf in k.buffers())


def test_pointwise_kernels_with_different_loop_nests_stay_apart():
    x = b.input_node("x", (64, 100), dt.float32)
    y = b.input_node("y", (50, 100), dt.float32)
    ks = _kernels([b.elementwise(Op.EXP, x), b.elementwise(Op.LOG, y)], [x, y])
    assert len(ks) == 2


def test_reduction_over_extent_one_axes_is_not_merged_as_pointwise():
    """Its loops look pointwise (the reduced axis has one element), but its store casts and
    reduces: merging it with a pointwise neighbour stored int32 values as int64."""
    x = b.input_node("x", (1, 40), dt.int32)
    total = b.reduce(Op.SUM, x, (0,))
    ks = _kernels([total, b.elementwise(Op.NEG, x)], [x])
    assert len(ks) == 2 and ks[0].reduction is not None


def test_stage_verification_is_on_in_the_suite_and_catches_a_malformed_graph():
    """JITCORE_VERIFY=1 (set by conftest) type-checks every stage; with it off the driver trusts
    the passes. A node that claims the wrong shape is caught only with verification on."""
    import pytest
    from jitcore import config
    from jitcore.ir.errors import CompileError
    from jitcore.ir.graph import Node
    assert config.get().verify
    x = b.input_node("x", (4,), dt.float32)
    bad = Node(Op.ADD, dt.float32, (5,), (x, x))          # x + x claims 5 elements
    g = Graph("bad", [x], [bad])
    with pytest.raises(CompileError, match="claims"):
        run_pipeline(g, 512, verify_stages=True)


def test_byte_transposes_tile_at_tile_lanes_without_masked_tails():
    """uint8 at 256 bits has 32 lanes but tiles of 16: a transposed read along a loop of 16 or
    17 elements is tiled without masked tails (an AVX2 target), not left scalar as shorter
    than a 32-lane vector; below one tile no tile fits."""
    for n, reason in ((16, None), (17, None), (15, "non_contiguous_load")):
        x = b.input_node("x", (n, n), dt.uint8)
        (k,) = _kernels([b.elementwise(Op.ADD, x, x)], [x], {"x": (1, n)}, bits=256)
        assert k.reason == reason, (n, k.reason)
        assert (k.tile_var is not None and k.lanes == 16) == (reason is None), (n, k.lanes)
