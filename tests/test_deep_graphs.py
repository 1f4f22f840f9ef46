"""Graphs far deeper than Python's recursion limit lower and compile (no recursive walks), and
every one of their steps counts: the check fails if any single step is dropped."""
import numpy as np

import jitcore as jc
from helpers import F32, ULP, assert_same

STEPS = 2000
# Step k adds (k even) or subtracts (k odd) 0.25 + (k % 7) / 8: exact in float32, distinct
# along the chain, and alternating so that |x| stays below |x0| + 1 = 2.
AMOUNTS = [0.25 + (k % 7) / 8 for k in range(STEPS)]       # Python floats: weak scalars
BOUND = 2.0


def chain(x, drop=None):
    for k in range(STEPS):
        if k == drop:
            continue
        x = x + AMOUNTS[k] if k % 2 == 0 else x - AMOUNTS[k]
    return x.sum()


def _tolerance(n: int) -> float:
    """Float32 error bound of the sum: each of the STEPS roundings per element is at most half
    an ulp of |x| <= BOUND, and so is each of the n roundings of the sum."""
    return (STEPS + n) * n * BOUND * ULP[F32] / 2


def test_two_thousand_op_chain_and_reduction():
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    tol = _tolerance(x.size)
    # dropping step k moves every element by AMOUNTS[k], the sum by x.size times that
    assert x.size * min(AMOUNTS) > 100 * tol
    got = jc.jit(chain)(x)
    assert_same(got, np.asarray(chain(x.astype(np.float64))), F32, rtol=0.0, atol=tol)
