"""The IR alone: typing rules, printer, structural hashing, verifier. No LLVM involved."""
import pytest

import jitcore.ir as ir
from jitcore.ir import Op
from jitcore.ir import build as b
from jitcore.ir import dtypes as dt
from jitcore.ir.graph import Graph, Node


def _graph():
    x = b.input_node("x", (4, 8), dt.float32)
    y = b.input_node("y", (8,), dt.float32)
    z = b.elementwise(Op.EXP, b.elementwise(Op.MUL, x, y))
    return Graph("g", [x, y], [b.reduce(Op.SUM, z, (1,))])


def test_printer_is_stable_and_readable():
    text = _graph().text()
    assert text == _graph().text()
    assert text.splitlines()[0] == "graph g(%x: f32[4,8], %y: f32[8]) {"
    assert "expand" in text and "sum" in text and text.rstrip().endswith("}")


def test_structural_hash_changes_with_structure():
    g1, g2 = _graph(), _graph()
    assert g1.digest() == g2.digest()
    x = b.input_node("x", (4, 8), dt.float32)
    y = b.input_node("y", (8,), dt.float32)
    other = Graph("g", [x, y], [b.reduce(Op.MAX, b.elementwise(Op.MUL, x, y), (1,))])
    assert other.digest() != g1.digest()


@pytest.mark.parametrize("a, c, expected", [
    (dt.float32, dt.float64, dt.float64), (dt.int32, dt.float32, dt.float64),
    (dt.uint8, dt.int32, dt.int32), (dt.bool_, dt.uint8, dt.uint8), (dt.int32, dt.int64, dt.int64),
])
def test_promotion_matches_numpy(a, c, expected):
    assert dt.promote(a, c) == expected


def test_weak_python_scalars():
    assert dt.promote_with_weak(dt.float32, 0.5) == dt.float32
    assert dt.promote_with_weak(dt.int32, 0.5) == dt.float64
    assert dt.promote_with_weak(dt.uint8, 1) == dt.uint8
    assert dt.promote_with_weak(dt.bool_, 1) == dt.int64


def test_broadcast_error_names_shapes():
    x = b.input_node("x", (3,), dt.float32)
    y = b.input_node("y", (4,), dt.float32)
    with pytest.raises(ir.ShapeError, match=r"\(3,\).*\(4,\)"):
        b.elementwise(Op.ADD, x, y)


def test_verifier_rejects_wrong_claimed_type():
    x = b.input_node("x", (4,), dt.float32)
    bad = Node(Op.EXP, dt.float64, (4,), (x,))
    with pytest.raises(ir.CompileError, match="claims f64"):
        ir.verify(Graph("bad", [x], [bad]))


def test_verifier_rejects_undeclared_input_and_mixed_shapes():
    x = b.input_node("x", (4,), dt.float32)
    y = b.input_node("y", (5,), dt.float32)
    with pytest.raises(ir.CompileError, match="not declared"):
        ir.verify(Graph("g", [x], [b.elementwise(Op.EXP, y)]))
    with pytest.raises(ir.CompileError, match="malformed"):
        ir.verify(Graph("g", [x, y], [Node(Op.ADD, dt.float32, (4,), (x, y))]))


def test_verifier_rejects_duplicate_inputs_and_no_outputs():
    x1 = b.input_node("x", (4,), dt.float32)
    x2 = b.input_node("x", (4,), dt.float32)
    with pytest.raises(ir.CompileError, match="duplicate"):
        ir.verify(Graph("g", [x1, x2], [x1]))
    with pytest.raises(ir.CompileError, match="no outputs"):
        ir.verify(Graph("g", [x1], []))


def test_reduction_of_empty_axis_without_identity_is_rejected():
    x = b.input_node("x", (0, 3), dt.float32)
    with pytest.raises(ir.ShapeError, match="no identity"):
        b.reduce(Op.MAX, x, (0,))
    assert b.reduce(Op.SUM, x, (0,)).shape == (3,)
