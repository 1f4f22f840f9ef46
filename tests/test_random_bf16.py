"""Random programs in bf16 (test_random_graphs.py's programs, two ways):

- matmul_precision="bf16": the float32 matmuls (GEMM and GEMV) and the convolutions a bf16
  kernel takes compute from operands rounded to bf16, summing in float32 (the vdpbf16ps
  kernels: jitcore/llvm/gemm_bf16.py, conv_pairs.py, conv_panel_pairs.py where the target
  has AVX512_BF16, the float32 kernels on rounded operands elsewhere; a conv no bf16 kernel
  takes computes in float32, so a conv is held to either result). The float64 reference
  rounds the same operands (a conv's weights after its batch norm is folded in, in float32,
  as jitcore folds them) and computes in float64; every other step as written. An
  operand jitcore computes exactly (an input, a view of one) rounds to the same bf16 value,
  so only float32 accumulation separates the two; an operand within e of the reference
  rounds to a bf16 value between those of the reference -e and +e (`rounded_bound`).
- jc.bfloat16 storage (ml_dtypes): the float32 inputs of programs of float32 stored as
  bf16. jitcore computes in float32 and rounds what it stores as bf16; the reference is
  float64 on the (exact) bf16 inputs, each bf16 value's bound gaining one bf16 ulp (its
  rounding, and the reference's rounding to bf16 in the comparison), and the result dtypes
  are numpy's with ml_dtypes (one deviation: a matmul of two bf16 operands is bf16).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import test_random_graphs as rg
from helpers import F32
from jitcore.llvm import bf16
from jitcore.passes.kernel import (MAX_CHANNEL_MULTIPLIER, MAX_DEPTHWISE_REACH,
                                   MAX_DEPTHWISE_TAPS, MAX_PHASES)

SETTINGS = settings(deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def rounded(x) -> np.ndarray:
    """float64 copy of x's values rounded to bf16 (through float32, as jitcore's float32
    values are)."""
    return bf16.rounded(np.asarray(x, np.float32)).astype(np.float64)


def rounded_bound(v, e, rounding=rounded) -> np.ndarray:
    """The bound on |rounding(x) - rounding(v)| for any x within e of v: rounding is
    monotone, so rounding(x) lies between rounding(v - e) and rounding(v + e) (0 where e is
    0, mostly 0 for an e far below bf16's spacing, which it rarely straddles)."""
    with rg.quiet_numpy():
        r = rounding(v)
        bound = np.maximum(rounding(v + e) - r, r - rounding(v - e))
    return np.where(np.isnan(bound), np.inf, bound)


def depthwise(step) -> bool:
    """Whether a conv step runs on the depthwise kernel (passes/kernel.py's Conv.depthwise),
    which stays float32 under the policy."""
    cout, cin_group, kh, kw = step[3]
    opts = dict(step[4])
    return cin_group == 1 and cout // opts["groups"] <= MAX_CHANNEL_MULTIPLIER and \
        opts["stride"] <= MAX_PHASES and kh * kw <= MAX_DEPTHWISE_TAPS and \
        (max(kh, kw) - 1) * opts["dilation"] <= MAX_DEPTHWISE_REACH


class Bf16Products(rg.Numerics):
    """matmul_precision="bf16": the steps that are float32 matmuls compute from bf16-rounded
    operands; so do non-depthwise float32 convs, where a bf16 kernel takes them (the pairs
    plans; the emulated one without AVX512_BF16), else they compute in float32 (conv.prepack:
    too few products per output), so a conv's bound covers both results."""

    def __init__(self, program):
        self.matmuls, self.convs, self.either = set(), set(), {}
        for k, (step, vals, out) in enumerate(rg.walk(program), start=len(program.input_shapes)):
            inner = step[1] if step[0] == "fork" else step
            if out.dtype == F32 and inner[0] == "matmul":
                self.matmuls.add(k)
            elif out.dtype == F32 and inner[0] == "conv" and not depthwise(inner):
                self.convs.add(k)

    @property
    def rounded(self) -> set:
        """The steps that may compute from rounded operands."""
        return self.matmuls | self.convs

    def operands(self, k, step, vals, errs):
        if k not in self.rounded:
            return step, vals, errs
        wide = (vals, errs)
        vals, errs = dict(vals), dict(errs)
        for i in set(rg.step_inputs(step)):
            vals[i], errs[i] = rounded(vals[i]), rounded_bound(vals[i], errs[i])
        if step[0] == "conv":        # the folded weights, rounded to float32, then to bf16
            with rg.quiet_numpy():   # either result, and either operands' error
                self.either[k] = np.abs(np.asarray(rg.apply_step(step + (rounded,), vals, True))
                                        - np.asarray(rg.apply_step(step, wide[0], True)))
            errs = {i: np.maximum(e, wide[1][i]) if i in step[1:2] else e
                    for i, e in errs.items()}
            step = step + (rounded,)
        return step, vals, errs

    def stored(self, k, out, err):
        return self.either.pop(k, np.zeros(out.shape))


@settings(SETTINGS, max_examples=40)
@given(st.one_of(rg.programs("float32"), rg.programs("float32", conv_first=True),
                 rg.programs()).map(rg.returning("matmul", "conv")))
def test_random_programs_with_bf16_products_match_numpy(program):
    numerics = Bf16Products(program)
    f = rg.check_program(program, numerics, matmul_precision="bf16")
    # kernels say they compute in bf16 for rounded steps only, and always for matmuls
    kernels = f.kernels(*rg.call_args(program, rg.program_inputs(program)))
    said = any("bf16" in str(k) for k in kernels)
    assert said or not numerics.matmuls & rg.live_values(program) - empty_values(program), \
        f"{program}\n{kernels}"
    assert numerics.rounded or not said, f"{program}\n{kernels}"


def empty_values(program) -> set:
    """The steps with no elements or an operand of none (a contraction of them compiles to
    no kernel of its kind)."""
    return {k for k, (step, vals, out) in enumerate(rg.walk(program),
                                                    start=len(program.input_shapes))
            if out.size == 0 or any(vals[i].size == 0 for i in rg.step_inputs(step))}


ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
U_BF16 = 2.0 ** -8                       # bf16's unit roundoff (8 significant bits)


def to_bf16(x) -> np.ndarray:
    """float64 copy of x rounded to bf16 once (as ml_dtypes and assert_close round)."""
    return np.asarray(x).astype(BF16).astype(np.float64)


@st.composite
def bf16_programs(draw):
    """float32 programs whose inputs are bf16 (all, or some: bf16 meets float32), and whose
    casts go to bf16 half the time."""
    program = draw(st.one_of(rg.programs("float32"), rg.programs("float32", conv_first=True)))
    every = draw(st.booleans())
    program.input_dtypes = [BF16 if every or draw(st.booleans()) else d
                            for d in program.input_dtypes]
    program.steps = [("astype", s[1], BF16) if s[0] == "astype" and draw(st.booleans()) else s
                     for s in program.steps]
    return program


def result_dtypes(program, inputs) -> list:
    """Every value's dtype: numpy's with ml_dtypes, but bf16 where ml_dtypes computes a
    step of bf16 operands into float32 other than by a cast: jitcore's result is bf16
    there (a matmul of two bf16 operands, API.md's deviation; np.clip's, Python bounds
    being weak)."""
    vals = list(inputs)
    for step in program.steps:
        inner = step[1] if step[0] == "fork" else step
        with rg.quiet_numpy():
            out = np.asarray(rg.apply_step(step, vals))
        if inner[0] != "astype" and out.dtype == F32 and \
                all(vals[i].dtype == BF16 for i in rg.step_inputs(inner)):
            out = out.astype(BF16)
        vals.append(out)
    return [v.dtype for v in vals]


class Bf16Storage(rg.Numerics):
    """bf16 values are computed in float32 and rounded to bf16 on store (between kernels,
    jitcore may keep them float32: the bound holds either way)."""

    def __init__(self, dtypes: list):
        self.bf16 = {k for k, d in enumerate(dtypes) if d == BF16}

    def stored(self, k, out, err):
        return U_BF16 * (np.abs(out) + err) if k in self.bf16 else np.zeros(out.shape)

    def compared(self, ref, err, dtype):
        return rounded_bound(ref, err, to_bf16) if dtype == BF16 else err


@settings(SETTINGS, max_examples=30)
@given(bf16_programs())
def test_random_programs_on_bf16_values_match_numpy(program):
    inputs = rg.program_inputs(program)
    dtypes = result_dtypes(program, inputs)
    rg.check_program(program, Bf16Storage(dtypes), inputs,
                     [dtypes[k] for k in program.outputs])
