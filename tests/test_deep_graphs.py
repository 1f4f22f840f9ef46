"""Graphs far deeper than Python's recursion limit lower and compile (no recursive walks)."""
import numpy as np

import jitcore as jc


def test_two_thousand_op_chain_and_reduction():
    def f(x):
        for _ in range(2000):
            x = x * 1.0001 + 0.5
        return x.sum()

    x = np.linspace(-1, 1, 100, dtype=np.float32)
    got = jc.jit(f)(x)
    ref = f(x.astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=1e-4)
