"""Shared test helpers: tolerances, a NaN-aware comparison against float64 references, and
deterministic random inputs per dtype.

Tolerances are stated once, per dtype, in `TOL`; reductions scale them with the reduced size
(`reduction_tol`). References are computed by numpy on float64 copies of the inputs (or exactly
on the original integer dtypes), and `assert_close` rounds the reference to the result dtype
before comparing, so overflow to +-inf and underflow to 0 in float32 match.
"""
from __future__ import annotations

import math
import re
import zlib

import numpy as np

import jitcore as jc

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I32 = np.dtype(np.int32)
I64 = np.dtype(np.int64)
U8 = np.dtype(np.uint8)
BOOL = np.dtype(np.bool_)

ALL_DTYPES = [F32, F64, I32, I64, U8, BOOL]
FLOAT_DTYPES = [F32, F64]
INT_DTYPES = [I32, I64, U8]
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES           # everything but bool
SIZES = [1, 7, 1023, 4097]                            # scalar-ish, sub-vector, vector tails

# Vector widths (bits) this process compiles for: the default (the CPU's, or the cap that
# JITCORE_VECTOR_WIDTH sets) and every narrower one. Value suites run the narrower ones too
# (jc.jit(vector_width=...)), so an AVX-512 machine also checks the AVX2 and SSE/NEON code.
WIDTHS = [w for w in (512, 256, 128) if w <= jc.target_info()["vector_bits"]]
NARROW_WIDTHS = WIDTHS[1:]

# ---- what the target promises ------------------------------------------------------------------
# Kernel-shape assertions derive from these, never from a fixed lane count or from masked tails:
# an AVX-512 host runs a loop shorter than a vector as one masked iteration, AVX2 and SSE hosts
# run it as scalar code (legality's `short_inner_loop`).
def target():
    """The target jc.jit compiles for now (read per call: the level copies of tests switch it)."""
    return jc.target_info()


def lanes(dtype, width=None) -> int:
    """Lanes of one vector of `dtype` at `width` bits (default: the width jc.jit picks)."""
    return max((width or target()["vector_bits"]) // (8 * np.dtype(dtype).itemsize), 1)


def vector_extent(kernel) -> int | None:
    """The iterations of a kernel's vector loop (its last loop), read from its loop nest; for a
    kernel of pieces (`...; then ...`) the shortest looping piece's. None when no loop is printed
    or an extent is a run-time value."""
    extents = []
    for piece in kernel.loop_nest.split("; then "):
        if piece.endswith("(one element)"):          # a piece of a rows kernel without loops
            continue
        found = re.findall(r" in 0\.\.(\S+) \(", piece)
        if not found or not found[-1].isdigit():
            return None
        extents.append(int(found[-1]))
    return min(extents, default=None)


def assert_vector_code(kernel, lanes: int):
    """What the target promises for a kernel whose vector loop would run `lanes`-lane vectors:
    vector code whenever that loop spans a vector, or the target masks tails; scalar code that
    says why (`short_inner_loop`) when a shorter loop would need a masked tail the target
    lacks. (An AVX-512 host masks tails at every width it compiles for.)"""
    n, masked = vector_extent(kernel), target()["masked_tails"]
    assert n is not None, f"no static vector loop in {kernel}"
    if kernel.vectorized:       # and a vector loop shorter than its vectors needs masks
        assert n >= kernel.lanes or masked, f"{n} < {kernel.lanes} lanes unmasked: {kernel}"
    elif n >= lanes or masked:
        raise AssertionError(f"{n} >= {lanes} lanes or masked tails, yet scalar: {kernel}")
    else:
        assert kernel.reason == "short_inner_loop", f"{n} < {lanes} lanes: {kernel}"


# (rtol, atol) per floating result dtype. rtol: 4 ulp of the result (an elementwise op or a
# short composite of them is within a few rounding errors; the vector math is <= 2.31 ulp,
# jitcore/llvm/vecmath.py). atol: 4 ulp of the denormal range only, where the spacing is fixed
# and a relative bound means nothing; it is far too small to pass a value flushed to zero.
# Where an output cancels terms larger than itself, pass `scale=` (the terms' magnitude) to
# assert_close: the rounding errors are relative to the terms, not to the result.
ULP = {F32: float(np.finfo(np.float32).eps), F64: float(np.finfo(np.float64).eps)}
TOL = {
    F32: (4 * ULP[F32], 4 * float(np.finfo(np.float32).smallest_subnormal)),
    F64: (4 * ULP[F64], 4 * float(np.finfo(np.float64).smallest_subnormal)),
}
# unit roundoff
EPS = {F32: ULP[F32] / 2, F64: ULP[F64] / 2}

# The documented deviations from numpy's result dtypes (API.md, ir/dtypes.py):
#   float16 (exp of uint8/bool, ...) -> float32: jitcore has no float16;
#   uint64 (sum/prod of uint8)       -> int64.
# Integer matmul returns float64: callers pass dtype=float64 for it.
DTYPE_DEVIATIONS = {np.dtype(np.float16): F32, np.dtype(np.uint64): I64}


def dtype_id(d) -> str:
    return np.dtype(d).name


def jit_dtype(numpy_dtype) -> np.dtype:
    """numpy's result dtype mapped through jitcore's documented deviations."""
    d = np.dtype(numpy_dtype)
    return DTYPE_DEVIATIONS.get(d, d)


def float_result(d) -> np.dtype:
    """The dtype of exp/sqrt/... of d in jitcore (numpy's, with float16 -> float32)."""
    with np.errstate(all="ignore"):
        return jit_dtype(np.exp(np.zeros(1, np.dtype(d))).dtype)


def reduction_tol(dtype, n: int, scale: float = 1.0) -> tuple:
    """(rtol, atol) for a sum-like reduction of n terms of magnitude <= scale.

    rtol grows with sqrt(n) * eps (random rounding errors of the accumulation), atol with
    n * eps * scale (cancelling sums compared against a float64 reference)."""
    d = np.dtype(dtype)
    if d not in TOL:
        return 0.0, 0.0
    rtol, atol = TOL[d]
    n = max(int(n), 1)
    return rtol + 8 * EPS[d] * math.sqrt(n), atol + 4 * n * EPS[d] * max(scale, 1e-30)


def _fmt_index(idx, shape):
    return tuple(int(i) for i in np.unravel_index(idx, shape)) if shape else ()


def assert_close(got, ref, dtype=None, *, rtol=None, atol=None, scale=None, exact=False,
                 msg=""):
    """Compare a jitcore result with a reference.

    got:   the array jitcore returned.
    ref:   reference values (float64 or the exact integer/bool values).
    dtype: numpy's result dtype for the operation; the documented deviations (DTYPE_DEVIATIONS)
           are applied, then got.dtype must equal it. None: the dtype is not checked (values are
           compared in ref's dtype kind).
    Floats (ml_dtypes bfloat16 too): NaN == NaN, infinities must match in sign, else
    |got - ref| <= atol + rtol*|ref|
    with TOL[dtype] unless rtol/atol are given (atol may be an array broadcast against ref:
    a bound per element); exact=True requires equality.
    scale: the magnitude of the terms each output is computed from (broadcast against ref),
           for outputs that cancel: the bound becomes atol + rtol * max(|ref|, scale).
    Integers and bools: exact equality of values.
    """
    prefix = (msg + ": ") if msg else ""
    assert isinstance(got, np.ndarray), f"{prefix}expected an ndarray, got {type(got).__name__}"
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{prefix}shape {got.shape} != expected {ref.shape}"
    if dtype is not None:
        want = jit_dtype(dtype)
        assert got.dtype == want, f"{prefix}dtype {got.dtype} != expected {want}"
    kind_dtype = got.dtype
    if got.size == 0:
        return
    if kind_dtype.kind != "f" and kind_dtype.name != "bfloat16":   # (ml_dtypes': kind "V")
        g = got.astype(np.int64) if kind_dtype.kind in "iub" else got
        r = ref
        if r.dtype.kind == "f":
            # integer results compared against float references must be exact integers
            bad = ~(g == r)
        else:
            bad = g != r.astype(np.int64) if r.dtype.kind in "iub" else g != r
        if np.any(bad):
            _fail(prefix + "values differ", got, ref, bad)
        return
    if rtol is None or atol is None:
        d_rtol, d_atol = TOL.get(kind_dtype, TOL[F64])
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
    if exact:
        rtol, atol = 0.0, 0.0
    with np.errstate(all="ignore"):
        r = ref.astype(kind_dtype).astype(np.float64)   # round the reference to the result dtype
        g = got.astype(np.float64)
        nan_g, nan_r = np.isnan(g), np.isnan(r)
        inf_g, inf_r = np.isinf(g), np.isinf(r)
        both_nan = nan_g & nan_r
        same_inf = inf_g & inf_r & (g == r)
        err = np.abs(g - r)
        mag = np.abs(r) if scale is None else np.maximum(np.abs(r), np.abs(scale))
        ok = (err <= atol + rtol * mag) | both_nan | same_inf
        ok &= ~(nan_g ^ nan_r)
        ok &= ~((inf_g | inf_r) & ~same_inf)
    if not np.all(ok):
        # atol may be an array (a bound per element): name its largest value
        _fail(prefix + f"not close (rtol={rtol:g}, atol={np.max(atol):g})", got, ref, ~ok)


def assert_same(got, expected, dtype=None, **tolerances):
    """`got` has exactly `expected`'s dtype (or `dtype`, when expected holds float64 reference
    values) and shape, and its values: equal for integers and bools, within assert_close's
    tolerances (keywords passed on) for floats. np.testing.assert_array_equal ignores dtypes;
    this does not."""
    expected = np.asarray(expected)
    want = np.dtype(dtype) if dtype is not None else expected.dtype
    got = np.asarray(got) if isinstance(got, np.generic) else got   # keeps the dtype
    assert isinstance(got, np.ndarray), f"expected an ndarray, got {type(got).__name__}"
    assert got.dtype == want, f"dtype {got.dtype} != expected {want}"
    assert got.shape == expected.shape, f"shape {got.shape} != expected {expected.shape}"
    if want.kind != "f" and not tolerances:
        tolerances = {"exact": True}
    assert_close(got, expected, **tolerances)


def _fail(what, got, ref, bad):
    bad = np.asarray(bad)
    flat = np.flatnonzero(bad.reshape(-1))
    lines = [f"{what}: {flat.size} of {bad.size} elements mismatch"]
    g, r = got.reshape(-1), np.asarray(ref).reshape(-1)
    for i in flat[:6]:
        lines.append(f"  at {_fmt_index(i, got.shape)}: got {g[i]!r}, expected {r[i]!r}")
    if got.dtype.kind == "f" or got.dtype.name == "bfloat16":
        with np.errstate(all="ignore"):
            err = np.abs(g.astype(np.float64) - r.astype(np.float64))
            fin = np.isfinite(err)
            if fin.any():
                lines.append(f"  max abs error {np.max(err[fin]):.3g}")
    raise AssertionError("\n".join(lines))


# ---- random inputs ---------------------------------------------------------------------------

def rng_for(*key) -> np.random.Generator:
    """A generator seeded deterministically from a key (e.g. the op name, dtype and size)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# safe integer ranges: products of two values do not overflow the dtype
_INT_RANGE = {I32: (-1000, 1000), I64: (-100000, 100000), U8: (0, 255)}


def make(shape, dtype, *, rng=None, low=None, high=None, positive=False, nonzero=False):
    """A random array of `shape` and `dtype`.

    floats: normal * 3 (negatives included) by default, or uniform in [low, high];
            positive=True: uniform in [0.1, 10]; nonzero=True: |x| >= 0.1.
    ints:   uniform in a safe range (whole range for uint8), or [low, high];
            positive=True: [1, 100] (uint8: [1, 15]).
    bool:   fair coin flips.
    """
    rng = rng if rng is not None else rng_for("make", shape, str(dtype))
    d = np.dtype(dtype)
    shape = tuple(shape) if not isinstance(shape, int) else (shape,)
    if d == BOOL:
        return rng.random(shape) < 0.5
    if d.kind == "f":
        if low is not None:
            x = rng.uniform(low, high, shape)
        elif positive:
            x = rng.uniform(0.1, 10.0, shape)
        else:
            x = rng.standard_normal(shape) * 3.0
        if nonzero:
            x = np.where(np.abs(x) < 0.1, np.copysign(0.1, x) + x, x)
        return x.astype(d)
    if low is None:
        if positive:
            low, high = (1, 15) if d == U8 else (1, 100)
        else:
            low, high = _INT_RANGE[d]
    x = rng.integers(low, high, shape, endpoint=True)
    if nonzero:
        x = np.where(x == 0, 1, x)
    return x.astype(d)


def saturating_astype(x, dtype) -> np.ndarray:
    """numpy's astype, with jitcore's rule for float -> integer (README: casts saturate, NaN ->
    0): truncate toward zero, then clamp to the target's range. numpy itself gives
    platform-dependent values out of range, so this reference converts element by element
    in Python integers, exactly, independently of jitcore's own code."""
    x, d = np.asarray(x), np.dtype(dtype)
    if x.dtype.kind != "f" or d.kind not in "iu":
        return x.astype(d)
    info = np.iinfo(d)

    def one(v: float) -> int:
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return int(info.max) if v > 0 else int(info.min)
        return min(max(math.trunc(v), int(info.min)), int(info.max))
    flat = [one(float(v)) for v in x.reshape(-1)]
    return np.array(flat, dtype=d).reshape(x.shape)


def f64(x):
    """A float64 copy, for references."""
    return np.asarray(x).astype(np.float64)

def softmax_ref(x, axis=-1):
    """float64 softmax along `axis`, for references."""
    x = f64(x)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax_ref(x, axis=-1):
    x = f64(x)
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def layer_norm_ref(x, w=None, b=None, eps=1e-5):
    """float64 layer norm over the last axis (two-pass variance), optional scale and shift."""
    x = f64(x)
    mu = x.mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    if w is not None:
        y = y * f64(w)
    if b is not None:
        y = y + f64(b)
    return y


def jc_dtype(d):
    """The jitcore dtype constant for a numpy dtype."""
    return {F32: jc.float32, F64: jc.float64, I32: jc.int32, I64: jc.int64, U8: jc.uint8,
            BOOL: jc.bool}[np.dtype(d)]


def erf64(x):
    """The error function on float64 values (math.erf, vectorized)."""
    x = np.asarray(x, np.float64)
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x.copy()


# ---- convolution reference (tests/test_conv.py, test_depthwise.py, test_random_graphs.py) ---

def resolve_padding(padding, kernel, dilation):
    """(top, bottom, left, right) as torch resolves it."""
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":
        out = []
        for k, d in zip(kernel, dilation):
            total = d * (k - 1)
            out += [total // 2, total - total // 2]
        return tuple(out)
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return (ph, ph, pw, pw)


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_tol(dtype, k: int) -> float:
    """gamma(k + 2) for the dtype: the relative bound on a sum of k + 2 terms (a conv output
    of k products plus its bias, in any order)."""
    u = np.finfo(dtype).eps / 2
    return (k + 2) * u / (1 - (k + 2) * u)


def assert_conv_close(got, ref, mag, dtype, k, msg=""):
    """|got - ref| <= gamma(k + 2) * mag (the sum of |terms|) + 4 ulp of |ref|."""
    eps = np.finfo(dtype).eps
    bound = conv_tol(dtype, k) * mag + 4 * eps * np.abs(ref) + np.finfo(dtype).tiny
    assert_close(got, ref, dtype, rtol=0, atol=bound, msg=msg)


def ref_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """(conv in float64, the same conv of |x| and |w| plus |b|: the sum of |terms|)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    pt, pb, pl, pr = resolve_padding(padding, w.shape[2:], (dh, dw))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out, mag = (np.zeros((n, o, oh, ow)) for _ in range(2))
    for src, wt, acc in ((x, w, out), (np.abs(x), np.abs(w), mag)):
        xp = np.pad(src, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        for g in range(groups):
            for i in range(kh):
                for j in range(kw):
                    patch = xp[:, g * cg:(g + 1) * cg,
                               i * dh:i * dh + sh * (oh - 1) + 1:sh,
                               j * dw:j * dw + sw * (ow - 1) + 1:sw]
                    acc[:, g * og:(g + 1) * og] += np.einsum(
                        "nchw,oc->nohw", patch, wt[g * og:(g + 1) * og, :, i, j])
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
        mag += np.abs(b.astype(np.float64))[None, :, None, None]
    return out, mag


def skip_unless_runnable(target: str) -> None:
    """Skip the calling test where this CPU cannot run code of `target` (an x86-64 level)."""
    import pytest
    try:
        jc.target_info(target=target)
    except jc.TargetError:
        pytest.skip(f"the host cannot run {target}")


def runnable_levels() -> list:
    """"native" and each x86-64 level this CPU can run (for tests parametrized over levels)."""
    from jitcore.ir.errors import TargetError
    from jitcore.llvm.target import LEVELS

    def runnable(level: str) -> bool:
        try:
            jc.target_info(target=level)
            return True
        except TargetError:
            return False
    return [lv for lv in ("native",) + tuple(LEVELS) if runnable(lv)]


def fresh_compiles(monkeypatch) -> None:
    """From here on in a test, every jit compiles anew: no graph, kernel IR or object code
    of an earlier compile is reused (in memory or on disk), so a module constant the test
    patches reaches the code."""
    from collections import OrderedDict

    from jitcore import compiler
    from jitcore.cache.lru import LRU
    from jitcore.llvm import engine, graph_module
    monkeypatch.setenv("JITCORE_DISK_CACHE", "0")
    monkeypatch.setattr(compiler, "_CACHE", LRU())
    monkeypatch.setattr(graph_module, "_EMITTED", OrderedDict())
    monkeypatch.setattr(engine, "OBJECTS", type(engine.OBJECTS)())
