"""The realistic graph suite (tests/graph_suite.py): every graph matches its float64 numpy
reference, the graphs with a stated kernel count fuse into that many kernels (and the ones
required to be vectorized are), and at least 95% of all the suite's kernels are vectorized."""
from __future__ import annotations

import functools

import pytest

import jitcore as jc
from graph_suite import SUITE
from helpers import assert_close, reduction_tol

CASES = {case.name: case for case in SUITE}
MIN_COVERAGE = 0.95


@functools.lru_cache(maxsize=None)
def jitted(name):
    """(the jitted function, its inputs) of one graph, made once per test session."""
    case = CASES[name]
    return jc.jit(case.fn), case.inputs()


def kernels_of(name):
    fn, args = jitted(name)
    return fn.kernels(*args)


def describe(kernels):
    return "; ".join(str(k).replace("\n", " ") for k in kernels)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_float64_reference(name):
    case = CASES[name]
    fn, args = jitted(name)
    rtol, atol = reduction_tol(case.dtype, case.terms, case.scale)
    assert_close(fn(*args), case.ref(*args), case.dtype, rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("name", [c.name for c in SUITE if c.kernels is not None])
def test_kernel_count(name):
    kernels = kernels_of(name)
    assert len(kernels) == CASES[name].kernels, f"{name}: {describe(kernels)}"


@pytest.mark.parametrize("name", [c.name for c in SUITE if c.all_vectorized])
def test_all_kernels_vectorized(name):
    scalar = [k for k in kernels_of(name) if not k.vectorized]
    assert not scalar, f"{name}: scalar kernels: {describe(scalar)}"


def test_suite_vectorized_coverage():
    kernels = [(name, k) for name in CASES for k in kernels_of(name)]
    scalar = [(name, k) for name, k in kernels if not k.vectorized]
    vectorized = len(kernels) - len(scalar)
    figure = f"{vectorized}/{len(kernels)} kernels vectorized ({vectorized / len(kernels):.1%})"
    print(f"\ncoverage: {figure}")
    assert vectorized >= MIN_COVERAGE * len(kernels), (
        f"coverage {figure} < {MIN_COVERAGE:.0%}; scalar kernels:\n"
        + "\n".join(f"  {name}: {k.name} ({k.kind}): {k.reason}" for name, k in scalar))
