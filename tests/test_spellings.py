"""Every row of the spelling table (jitcore/ops/spellings.py), every spelling of it: the jc
function and its aliases, numpy's ufuncs and functions, the Python operator (and its
reflection) and the Tracer method build the same graph, recording the row's op, for each
dtype the row admits, and the value is numpy's (a float64 reference for float results).
Parametrized from the table, so a new row is under test as soon as it is written."""
from __future__ import annotations

import math
import operator

import numpy as np
import pytest

import jitcore as jc
from jitcore.ops.spellings import ALL, BY_NAME, SPELLINGS, implementation

ELEMENTWISE = [r for r in SPELLINGS if not r.reduction]
REDUCTIONS = [r for r in SPELLINGS if r.reduction]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# references for the rows numpy has no spelling of (called on float64 for float results)
REFERENCE = {
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "erf": _erf,
    "silu": lambda x: x * _sigmoid(x),
    "hardswish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "hardsigmoid": lambda x: np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "relu6": lambda x: np.clip(x, 0, 6),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.01 * x),
    "hardtanh": lambda x: np.clip(x, -1.0, 1.0),
}
TOLERANCE = {np.dtype(np.float32): dict(rtol=1e-5, atol=1e-6),
             np.dtype(np.float64): dict(rtol=1e-12, atol=1e-14)}


def _inputs(arity: int, dtype: str) -> list:
    """Operands of shape (3, 4) and (4,): the second one positive and small (a divisor, an
    exponent, a shift count); where's condition first."""
    d = np.dtype(dtype)
    if d.kind == "f":
        x = np.linspace(-2.5, 2.5, 12).reshape(3, 4)
        y = np.array([0.5, 1.25, 2.0, -1.5])
    elif d.kind == "b":
        x = (np.arange(12) % 3 == 0).reshape(3, 4)
        y = np.array([True, False, True, True])
    else:
        x = (np.arange(12) - (0 if d.kind == "u" else 5)).reshape(3, 4)
        y = np.array([1, 2, 3, 4])
    x, y = x.astype(d), y.astype(d)
    if arity == 3:
        return [np.arange(12).reshape(3, 4) % 2 == 0, x, y]
    return [x, y][:arity]


def _graph(fn, arrays) -> str:
    """The traced graph of fn on the arrays, or the error it raises, as text."""
    f = [lambda x: fn(x), lambda x, y: fn(x, y), lambda c, x, y: fn(c, x, y)][len(arrays) - 1]
    try:
        return jc.jit(f).graph(*arrays)
    except Exception as e:          # noqa: BLE001 -- every spelling must raise the same
        return f"{type(e).__name__}: {e}"


def _operator(dunder: str):
    return getattr(operator, dunder, None) or getattr(operator, dunder + "_")


def _spellings(row) -> dict:
    """Each way of writing the row's op, as a function of its tensor operands."""
    found = {f"jc.{row.name}": implementation(row.name)}
    for u in row.ufuncs:
        found[f"np.{u}"] = getattr(np, u)
    for f in row.functions:
        found[f"np.{f}()"] = getattr(np, f)
    if row.dunder is not None:
        found[f"__{row.dunder}__"] = _operator(row.dunder)
    if row.method is not None:
        found[f".{row.method}()"] = lambda x, *rest, _m=row.method: getattr(x, _m)(*rest)
    return found


def _reference(row, arrays):
    """numpy's value: the row's numpy spelling, else REFERENCE."""
    if row.name in REFERENCE:
        return REFERENCE[row.name]
    if row.ufuncs:
        return getattr(np, row.ufuncs[0])
    return getattr(np, row.functions[0])


def _check_value(row, arrays, got):
    got = np.asarray(got)
    ref = _reference(row, arrays)
    if got.dtype.kind == "f":
        # the operands in float64 (where's condition stays bool)
        wide = [a if row.arity == 3 and i == 0 else a.astype(np.float64)
                for i, a in enumerate(arrays)]
        with np.errstate(all="ignore"):
            want = ref(*wide)
        np.testing.assert_allclose(got, want, **TOLERANCE[got.dtype], err_msg=row.name)
    else:
        with np.errstate(all="ignore"):
            want = np.asarray(ref(*arrays))
        assert got.dtype == want.dtype, (row.name, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=row.name)


def _cases(rows, dtypes=ALL):
    return [pytest.param(r, d, id=f"{r.name}-{d}") for r in rows for d in dtypes]


@pytest.mark.parametrize("row,dtype", _cases(ELEMENTWISE))
def test_every_spelling_builds_the_same_graph(row, dtype):
    """On every dtype (admitted or not: then each spelling raises the same error)."""
    arrays = _inputs(row.arity, dtype)
    graphs = {name: _graph(fn, arrays) for name, fn in _spellings(row).items()}
    first = graphs[f"jc.{row.name}"]
    for name, text in graphs.items():
        assert text == first, f"{name} and jc.{row.name} differ on {dtype}:\n{text}\n{first}"
    if row.reflected and row.dunder is not None and row.arity == 2:
        reflected = _operator(row.dunder)
        scalar = True if dtype == "bool" else 2
        assert _graph(lambda x: reflected(scalar, x), arrays[:1]) == \
            _graph(lambda x: implementation(row.name)(scalar, x), arrays[:1])
    if dtype in row.dtypes:
        assert not first.split(":")[0].endswith("Error"), first
        if row.op is not None:
            assert f"= {row.op!r} " in first, f"jc.{row.name} records no {row.op!r}:\n{first}"


@pytest.mark.parametrize("row,dtype", [c for c in _cases(ELEMENTWISE)
                                        if c.values[1] in c.values[0].dtypes])
def test_every_row_computes_numpys_value(row, dtype):
    arrays = _inputs(row.arity, dtype)
    fn = implementation(row.name)
    f = [lambda x: fn(x), lambda x, y: fn(x, y), lambda c, x, y: fn(c, x, y)][row.arity - 1]
    _check_value(row, arrays, jc.jit(f)(*arrays))


@pytest.mark.parametrize("row,dtype", [c for c in _cases(REDUCTIONS)
                                        if c.values[1] in c.values[0].dtypes])
def test_every_reduction_spelling(row, dtype):
    """jc.<name>(x, axis), np.<function>(x, axis), x.<method>(axis) and np.<ufunc>.reduce:
    one graph, numpy's values."""
    (x,) = _inputs(1, dtype)
    fn = implementation(row.name)
    spelled = _spellings(row)
    spelled.update({f"np.{u}.reduce": getattr(np, u).reduce for u in row.reduces})
    for axis in (None, 1):
        if axis is None and any(name.endswith(".reduce") for name in spelled):
            spelled = {k: v for k, v in spelled.items() if not k.endswith(".reduce")}
        graphs = {name: _graph(lambda a, _f=f: _f(a, axis), [x]) for name, f in spelled.items()}
        assert len(set(graphs.values())) == 1, graphs
        got = np.asarray(jc.jit(lambda a: fn(a, axis))(x))
        want = np.asarray(getattr(np, row.functions[0])(x, axis=axis))
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, want, **TOLERANCE[got.dtype])
        else:
            np.testing.assert_array_equal(got, want)


def _numpy_positional_calls(row):
    """(text, args after the array) in numpy's positional order for the row's reduction."""
    wide = {"dtype": np.float64, "out": None, "keepdims": True, "axis": 1}
    for k in range(1, len(row.numpy_params) + 1):
        params = row.numpy_params[:k]
        yield ", ".join(params), tuple(wide[p] for p in params)


@pytest.mark.parametrize("row", [pytest.param(r, id=r.name) for r in REDUCTIONS])
def test_reductions_take_numpys_positional_order(row):
    """x.sum(1, np.float64) is a float64 sum over axis 1 (not keepdims=np.float64), for every
    reduction row, through its method, its numpy functions and its ufunc.reduce: the result's
    dtype, shape and values are numpy's; out= is refused."""
    x = np.random.default_rng(0).uniform(-2, 2, (3, 5)).astype(np.float32)
    spelled = {f"x.{row.method}": lambda a, *p: getattr(a, row.method)(*p)}
    spelled.update({f"np.{f}": getattr(np, f) for f in row.functions})
    spelled.update({f"np.{u}.reduce": getattr(np, u).reduce for u in row.reduces})
    for params, args in _numpy_positional_calls(row):
        for name, f in spelled.items():
            if name.endswith(".reduce") and "dtype" not in row.numpy_params:
                continue                     # maximum.reduce's order is (axis, dtype, ...)
            got = np.asarray(jc.jit(lambda a, _f=f: _f(a, *args))(x))
            want = np.asarray(f(x, *args))
            assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{name}(x, {params})"
            np.testing.assert_allclose(got, want, **TOLERANCE[np.dtype(np.float32)],
                                       err_msg=f"{name}(x, {params})")
    with pytest.raises(jc.TraceError, match="out="):
        jc.jit(lambda a: getattr(a, row.method)(axis=1, out=np.empty(3)))(x)


def test_every_row_has_a_reference_and_one_function_per_name():
    """A row numpy cannot spell needs a REFERENCE here; aliases are the same function; the
    doc is the row's."""
    for row in SPELLINGS:
        assert row.ufuncs or row.functions or row.name in REFERENCE, \
            f"{row.name}: add its numpy reference to REFERENCE"
        fn = implementation(row.name)
        assert fn.__doc__ == row.doc, row.name
        for name in row.names:
            assert getattr(jc, name) is fn, f"jc.{name} is not the table's {row.name}"
    assert set(REFERENCE) <= set(BY_NAME)


def test_every_aten_overload_of_the_table_is_lowered_through_it():
    torch = pytest.importorskip("torch")
    from jitcore.torch.lowering import LOWERINGS, aten_overload
    for row in SPELLINGS:
        for name in row.aten:
            target = aten_overload(name)
            assert isinstance(target, torch._ops.OpOverload), name
            assert target in LOWERINGS, f"aten.{name} (row {row.name}) has no lowering"
