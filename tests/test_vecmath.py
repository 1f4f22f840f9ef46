"""Accuracy and special-value tests for jitcore.llvm.vecmath.

Every function is JIT-compiled into ``void apply_<fn>(T* in, T* out, i64 n)`` (vector loop of
N lanes plus a scalar tail) and compared with a higher-precision numpy reference: float64 for
float32 targets, long double (where wider than double) for float64 targets.  numpy has no
erf: float32 uses ``math.erf``, float64 a long-double series (math.erf is ~1 ulp off itself).

Error metric: |got - ref| / spacing(|ref rounded to the target dtype|), so a correctly rounded
result has error <= 0.5 ulp; below the smallest normal the denormal spacing applies.

Run ``PYTHONPATH=. python tests/test_vecmath.py`` for a larger sweep and a table of results.
"""

import ctypes
import math
import platform
import re
import time

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from jitcore.llvm import vecmath

FUNCS = ("exp", "log", "tanh", "erf", "sin", "cos", "atan", "cbrt", "expm1", "log1p",
         "log2", "log10", "exp2", "sinh", "cosh", "sigmoid")
DTYPES = (np.float32, np.float64)

# Max ulp error allowed per (dtype, function).
BOUNDS = {
    np.float32: dict(exp=4, log=4, tanh=4, erf=4, sin=4, cos=4, atan=1, cbrt=0.75, expm1=1.05,
                     log1p=1, log2=1.05, log10=1.05, exp2=0.8, sinh=1.6, cosh=1.4, sigmoid=3),
    np.float64: dict(exp=4, log=4, tanh=8, erf=8, sin=8, cos=8, atan=2, cbrt=0.75, expm1=1.1,
                     log1p=1, log2=1.05, log10=1.05, exp2=0.8, sinh=1.6, cosh=1.4, sigmoid=3),
}
# sin/cos must be accurate up to this |x| (required: 1e5 / 1e9; the reduction holds up to
# 2^(mant-1) * pi/2); beyond it any value in [-1, 1] is accepted.
SINCOS_ACCURATE = {np.float32: 6.5e6, np.float64: 3.5e15}


# --------------------------------------------------------------------------------------
# Minimal JIT harness (kept separate so it can be swapped for the project's engine)
# --------------------------------------------------------------------------------------

_JIT = {}
_LINKED = [0]                           # libraries linked so far (their names must differ)


def _engine(cpu: str = "host"):
    """(target machine, LLJIT) for the host (or a named CPU, without host features), one
    per CPU."""
    if cpu not in _JIT:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        native = cpu == "host"
        tm = llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name() if native else cpu,
            features=llvm.get_host_cpu_features().flatten() if native else "",
            opt=3, jit=True)
        _JIT[cpu] = (tm, llvm.create_lljit_compiler(tm))
    return _JIT[cpu]


def widest_lanes(dtype) -> int:
    """Lanes of the widest native vector: 512 bits with AVX-512, else 256."""
    bits = 512 if "+avx512f" in llvm.get_host_cpu_features().flatten() else 256
    return bits // (8 * np.dtype(dtype).itemsize)


def _ir_type(dtype) -> ir.Type:
    return ir.FloatType() if np.dtype(dtype) == np.float32 else ir.DoubleType()


def build_apply(module: ir.Module, name: str, dtype, lanes: int) -> ir.Function:
    """Add ``void apply_<name>(T* in, T* out, i64 n)``: vector loop then scalar tail loop."""
    fty = _ir_type(dtype)
    i64 = ir.IntType(64)
    size = np.dtype(dtype).itemsize
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 2 + [i64]),
                     f"apply_{name}")
    src, dst, n = fn.args
    entry = fn.append_basic_block("entry")
    if lanes > 1:
        vhead, vbody = fn.append_basic_block("vhead"), fn.append_basic_block("vbody")
    thead, tbody, done = (fn.append_basic_block(s) for s in ("thead", "tbody", "done"))

    b = ir.IRBuilder(entry)
    nvec = b.mul(b.sdiv(n, i64(lanes)), i64(lanes)) if lanes > 1 else i64(0)
    b.branch(vhead if lanes > 1 else thead)

    def body(block, head, i, ty, step):
        b.position_at_end(block)
        v = b.load(b.gep(src, [i], source_etype=fty), typ=ty, align=size)
        b.store(vecmath.emit_math(b, name, v), b.gep(dst, [i], source_etype=fty), align=size)
        nxt = b.add(i, i64(step))
        b.branch(head)
        return nxt

    if lanes > 1:
        b.position_at_end(vhead)
        i = b.phi(i64)
        b.cbranch(b.icmp_signed("<", i, nvec), vbody, thead)
        i.add_incoming(i64(0), entry)
        i.add_incoming(body(vbody, vhead, i, ir.VectorType(fty, lanes), lanes), vbody)

    b.position_at_end(thead)
    j = b.phi(i64)
    b.cbranch(b.icmp_signed("<", j, n), tbody, done)
    j.add_incoming(nvec, vhead if lanes > 1 else entry)
    j.add_incoming(body(tbody, thead, j, fty, 1), tbody)

    b.position_at_end(done)
    b.ret_void()
    return fn


def build_module(dtype, lanes: int) -> ir.Module:
    module = ir.Module(name=f"vecmath_test_{np.dtype(dtype).name}_{lanes}")
    module.triple = llvm.get_process_triple()
    for name in FUNCS:
        build_apply(module, name, dtype, lanes)
    return module


def _with_vector_width_attr(text: str, bits: int) -> str:
    """Tag the apply functions with "min-legal-vector-width" (llvmlite only adds flags)."""
    text = re.sub(r'(define void @"?apply_\w+"?\([^)]*\))', r"\1 #0", text)
    return text + f'\nattributes #0 = {{ "min-legal-vector-width"="{bits}" }}\n'


class Kernels:
    """JIT-compiled apply_<fn> for one (dtype, lanes) on the host (or on `cpu`); call as
    kernels(name, x)."""

    def __init__(self, dtype, lanes: int, cpu: str = "host"):
        tm, jit = _engine(cpu)
        self.dtype, self.lanes = np.dtype(dtype).type, lanes
        text = str(build_module(dtype, lanes))
        bits = lanes * 8 * np.dtype(dtype).itemsize
        if bits > 256:
            text = _with_vector_width_attr(text, bits)
        mod = llvm.parse_assembly(text)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(3)
        if lanes == 1:  # keep the scalar variant scalar
            pto.loop_vectorization = False
            pto.slp_vectorization = False
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        self.optimized_ir = str(mod)
        builder = llvm.JITLibraryBuilder().add_object_img(tm.emit_object(mod))
        builder.add_current_process()
        for name in FUNCS:
            builder.export_symbol(f"apply_{name}")
        _LINKED[0] += 1
        self._lib = builder.link(jit, f"vecmath_test_{_LINKED[0]}")  # keep alive
        proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
        self._fns = {name: proto(self._lib[f"apply_{name}"]) for name in FUNCS}

    def __call__(self, name: str, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=self.dtype)
        out = np.empty_like(x)
        self._fns[name](x.ctypes.data, out.ctypes.data, x.size)
        return out


@pytest.fixture(scope="module")
def kernels():
    """get(dtype, lanes) -> Kernels, compiled once per (dtype, lanes)."""
    cache = {}

    def get(dtype, lanes):
        key = (np.dtype(dtype).name, lanes)
        if key not in cache:
            cache[key] = Kernels(dtype, lanes)
        return cache[key]

    return get


# --------------------------------------------------------------------------------------
# Reference, inputs and error metric
# --------------------------------------------------------------------------------------

_erf_vec = np.frompyfunc(math.erf, 1, 1)
_PI_LD = np.longdouble("3.14159265358979323846264338327950288")


def _erf_longdouble(x: np.ndarray) -> np.ndarray:
    """erf in long double (~0.01 double ulp): numpy has no erf and math.erf is itself ~1 ulp
    off in places.  erf(a) = 2/sqrt(pi) exp(-a^2) sum_n 2^n a^(2n+1) / (1*3*...*(2n+1)), a
    series of positive terms (no cancellation); erf(a) rounds to 1 in double for a > 6."""
    a = np.abs(x.astype(np.longdouble))
    out = np.where(np.isnan(a), a, np.longdouble(1.0))
    mid = a < 6.5
    am = a[mid]
    a2 = am * am
    term, total = am.copy(), am.copy()
    for n in range(1, 160):
        term *= 2 * a2 / (2 * n + 1)
        total += term
    out[mid] = 2 / np.sqrt(_PI_LD) * np.exp(-a2) * total
    return np.copysign(out, x.astype(np.longdouble))


def _hi_dtype(dtype):
    if np.dtype(dtype) == np.float32:
        return np.float64
    wide = np.finfo(np.longdouble).nmant > np.finfo(np.float64).nmant
    return np.longdouble if wide else np.float64


def reference(name: str, x: np.ndarray) -> np.ndarray:
    """name(x) in higher precision than x's dtype."""
    hi = _hi_dtype(x.dtype)
    with np.errstate(all="ignore"):
        if name == "erf" and hi == np.longdouble:
            return _erf_longdouble(x)
        if name == "erf":
            return _erf_vec(x.astype(np.float64)).astype(np.float64).astype(hi)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-x.astype(hi)))
        return getattr(np, name)(x.astype(hi))


def edge_values(dtype) -> np.ndarray:
    """Special and boundary inputs (both signs)."""
    fi = np.finfo(dtype)
    t = np.dtype(dtype).type
    vals = [0.0, fi.smallest_subnormal, fi.smallest_normal - fi.smallest_subnormal,
            fi.smallest_normal, fi.max, np.inf, np.nan, 1.0, 0.5, 2.0, 1e-3, 0.1, 0.625,
            0.875, 3.0, 5.0, 9.0, 20.0, 100.0, np.pi, np.pi / 2, np.pi / 4, 1e4, 1e5]
    # exp overflow / denormal / underflow boundaries, tanh and erf saturation
    vals += [math.log(float(fi.max)), math.log(float(fi.smallest_normal)),
             math.log(float(fi.smallest_subnormal)) - math.log(2.0), 9.01, 19.06, 3.9192, 5.9216]
    if np.dtype(dtype) == np.float64:
        vals += [1e9, 1e15]
    base = np.array(vals, dtype=dtype)
    with np.errstate(all="ignore"):
        near = np.concatenate([np.nextafter(base, t(np.inf)), np.nextafter(base, t(-np.inf))])
    out = np.concatenate([base, near])
    return np.concatenate([out, -out])


def sweep(name: str, dtype, n: int, seed: int = 0) -> np.ndarray:
    """Random bit patterns (log-uniform over the whole range) plus a dense uniform sweep of
    the region where the function is not trivial, plus the edge values."""
    rng = np.random.default_rng(seed)
    ity = np.uint32 if np.dtype(dtype) == np.float32 else np.uint64
    bits = rng.integers(0, np.iinfo(ity).max, size=n, dtype=ity, endpoint=True).view(dtype)
    f64 = np.dtype(dtype) == np.float64
    lo, hi = {
        "exp": (-746.0, 710.0) if f64 else (-104.0, 89.0),
        "log": (0.0, 4.0),
        "tanh": (-25.0, 25.0) if f64 else (-12.0, 12.0),
        "erf": (-7.0, 7.0) if f64 else (-5.0, 5.0),
        "sin": (-10.0, 10.0),
        "cos": (-10.0, 10.0),
        "atan": (-4.0, 4.0),            # the reduction's breakpoints 0.4375 ... 2.4375
        "cbrt": (-10.0, 10.0),
        "expm1": (-3.0, 3.0),           # k = 0 (the polynomial alone) and both signs of k
        "log1p": (-1.0, 3.0),           # both forms of the rounding correction
        "log2": (0.0, 4.0),
        "log10": (0.0, 4.0),
        "exp2": (-1080.0, 1030.0) if f64 else (-155.0, 130.0),
        "sinh": (-711.0, 711.0) if f64 else (-90.0, 90.0),     # past exp's overflow too
        "cosh": (-711.0, 711.0) if f64 else (-90.0, 90.0),
        # exp(x)'s denormals (the result below) to where the result rounds to 1
        "sigmoid": (-750.0, 40.0) if f64 else (-110.0, 20.0),
    }[name]
    dense = rng.uniform(lo, hi, size=n).astype(dtype)
    parts = [bits, dense, edge_values(dtype)]
    if name in ("sin", "cos"):
        limit = SINCOS_ACCURATE[dtype]
        # log-uniform over the accurate range
        mag = np.exp(rng.uniform(np.log(1e-3), np.log(limit), size=n))
        parts.append((mag * rng.choice([-1.0, 1.0], size=n)).astype(dtype))
        # the floats nearest to multiples of pi/2, where the reduced argument is tiny
        pio2 = np.longdouble("1.57079632679489661923132169163975144")
        k = rng.integers(1, int(limit / pio2), size=n // 4)
        parts.append((k * pio2).astype(dtype))
    return np.concatenate(parts)


def ulp_errors(got: np.ndarray, ref: np.ndarray, dtype) -> np.ndarray:
    """ulp error where the rounded reference is finite (inf elsewhere if got is not equal)."""
    with np.errstate(over="ignore"):
        ref_t = ref.astype(dtype)
    err = np.zeros(got.shape, dtype=np.float64)
    fin = np.isfinite(ref_t)
    spacing = np.spacing(np.abs(ref_t[fin])).astype(ref.dtype)
    with np.errstate(all="ignore"):
        err[fin] = np.abs(got[fin].astype(ref.dtype) - ref[fin]) / spacing
    err[fin & ~np.isfinite(got)] = np.inf
    return err


def check_specials(name: str, x: np.ndarray, got: np.ndarray, ref: np.ndarray, dtype):
    """NaN-ness, infinities and signed zeros must match the reference exactly."""
    with np.errstate(over="ignore"):
        ref_t = ref.astype(dtype)
    bad = np.isnan(got) != np.isnan(ref_t)
    assert not bad.any(), f"{name}: NaN mismatch at x={x[bad][:5]} got={got[bad][:5]}"
    inf = np.isinf(ref_t)
    bad = inf & (got != ref_t)
    assert not bad.any(), f"{name}: inf mismatch at x={x[bad][:5]} got={got[bad][:5]}"
    zero = x == 0
    bad = zero & ((got != ref_t) | (np.signbit(got) != np.signbit(ref_t)))
    assert not bad.any(), f"{name}: signed zero mismatch: x={x[bad]} got={got[bad]}"


def measure(kern: Kernels, name: str, x: np.ndarray, ref: np.ndarray):
    """(max ulp over the accurate range, worst x, outputs) for one function."""
    dtype = kern.dtype
    got = kern(name, x)
    err = ulp_errors(got, ref, dtype)
    if name in ("sin", "cos"):
        err[~(np.abs(x) <= SINCOS_ACCURATE[dtype])] = 0.0
    i = int(np.argmax(err))
    return float(err[i]), x[i], got


# --------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------

_REF_CACHE = {}


def _cases(name, dtype, n=150_000):
    key = (name, np.dtype(dtype).name, n)
    if key not in _REF_CACHE:
        x = sweep(name, dtype, n)
        _REF_CACHE[key] = (x, reference(name, x))
    return _REF_CACHE[key]


@pytest.mark.parametrize("lanes", ["scalar", "widest"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", FUNCS)
def test_accuracy(kernels, name, dtype, lanes):
    n_lanes = 1 if lanes == "scalar" else widest_lanes(dtype)
    kern = kernels(dtype, n_lanes)
    x, ref = _cases(name, dtype)
    max_ulp, worst, got = measure(kern, name, x, ref)
    print(f"\n{name:5s} {np.dtype(dtype).name} lanes={n_lanes:2d}: max {max_ulp:.3f} ulp "
          f"(x={worst!r})", end="")
    check_specials(name, x, got, ref, dtype)
    assert max_ulp <= BOUNDS[dtype][name], f"{name} at x={worst!r}"
    if name in ("sin", "cos"):  # huge arguments: any value, but in [-1, 1]
        fin = np.isfinite(x)
        assert np.all(np.abs(got[fin]) <= 1.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_odd_lane_count(kernels, dtype):
    """A non-power-of-two width (3 lanes) gives the same accuracy."""
    kern = kernels(dtype, 3)
    for name in FUNCS:
        x, ref = _cases(name, dtype)
        x, ref = x[::20], ref[::20]
        max_ulp, worst, got = measure(kern, name, x, ref)
        check_specials(name, x, got, ref, dtype)
        assert max_ulp <= BOUNDS[dtype][name], f"{name} at x={worst!r}"


# the kernels that promise their accuracy without FMA (x86-64-v2: SSE4.2, fmuladd unfused):
# sin/cos need FMA for large arguments, the others hold their bounds
NO_FMA_FUNCS = ("exp", "log", "atan", "cbrt", "expm1", "log1p", "log2", "log10", "exp2",
                "sigmoid")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 CPU names")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_accuracy_without_fma(dtype):
    """The same bounds on a target without FMA (4 x float / 2 x double): nothing may
    depend on the host's fused multiply-add."""
    kern = Kernels(dtype, 16 // np.dtype(dtype).itemsize, cpu="x86-64-v2")
    for name in NO_FMA_FUNCS:
        x, ref = _cases(name, dtype)
        x, ref = x[::4], ref[::4]
        max_ulp, worst, got = measure(kern, name, x, ref)
        check_specials(name, x, got, ref, dtype)
        assert max_ulp <= BOUNDS[dtype][name], f"{name} at x={worst!r}"


def _callees(ir_text: str):
    return set(re.findall(r'\bcall\b[^@]*@"?([\w.$-]+)', ir_text))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_only_llvm_intrinsics(kernels, dtype):
    """The emitted and the optimized IR call nothing but llvm.* intrinsics (no libm)."""
    lanes = widest_lanes(dtype)
    emitted = str(build_module(dtype, lanes))
    optimized = kernels(dtype, lanes).optimized_ir
    for text in (emitted, optimized):
        callees = _callees(text)
        assert callees, "expected fmuladd calls"
        assert all(c.startswith("llvm.") for c in callees), callees
    assert "llvm.fmuladd" in emitted
    # and the machine code has no calls at all (intrinsics were lowered inline)
    tm, _ = _engine()
    asm = tm.emit_assembly(llvm.parse_assembly(optimized))
    assert not re.search(r"^\s*call", asm, re.M)


def test_declarations_reused():
    """Several emissions share one fmuladd declaration per type."""
    module = ir.Module()
    vty = ir.VectorType(ir.FloatType(), 8)
    fn = ir.Function(module, ir.FunctionType(vty, [vty, ir.DoubleType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    decl = ir.Function(module, ir.FunctionType(vty, [vty] * 3), "llvm.fmuladd.v8f32")
    y = fn.args[0]
    for name in FUNCS:
        y = vecmath.emit_math(b, name, y)
    vecmath.emit_math(b, "exp", fn.args[1])
    b.ret(y)
    names = [g.name for g in module.global_values]
    assert names.count("llvm.fmuladd.v8f32") == 1 and names.count("llvm.fmuladd.f64") == 1
    assert module.globals["llvm.fmuladd.v8f32"] is decl
    llvm.parse_assembly(str(module)).verify()


def test_errors():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.FloatType(), ir.IntType(32),
                                                              ir.HalfType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(ValueError):
        vecmath.emit_math(b, "sqrt", fn.args[0])
    with pytest.raises(ValueError):
        vecmath.emit_math(b, "exp", fn.args[1])
    with pytest.raises(ValueError):
        vecmath.emit_math(b, "exp", fn.args[2])
    with pytest.raises(ValueError):
        vecmath.emit_math(b, "sin", ir.Constant(ir.VectorType(ir.IntType(32), 4), None))
    assert vecmath.SUPPORTED == frozenset(FUNCS)


# --------------------------------------------------------------------------------------
# Larger sweep: python tests/test_vecmath.py
# --------------------------------------------------------------------------------------

def measure_all(n: int = 4_000_000):
    """Print max ulp per function / dtype / lanes over a sweep of ~2n points each."""
    t0 = time.time()
    print(f"{'func':5s} {'dtype':8s} {'lanes':>5s} {'max ulp':>8s}  worst x")
    for dtype in DTYPES:
        kerns = [Kernels(dtype, 1), Kernels(dtype, widest_lanes(dtype))]
        for name in FUNCS:
            x = sweep(name, dtype, n, seed=1)
            ref = reference(name, x)
            for kern in kerns:
                max_ulp, worst, got = measure(kern, name, x, ref)
                check_specials(name, x, got, ref, dtype)
                print(f"{name:5s} {np.dtype(dtype).name:8s} {kern.lanes:5d} {max_ulp:8.3f}  "
                      f"{worst!r}", flush=True)
    print(f"({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    measure_all()
