"""The front's one table of op spellings: per elementwise op and reduction, every name it
answers to (the jc function and its aliases, numpy's ufuncs and functions, the Python
operator, the Tracer method, the ATen overloads whose semantics are the op's) and its doc.

Everything else is generated from the rows: `jitcore.ops.core` makes the jc function of each
row that records its op directly (`custom=False`), `jitcore.ops.numpy_dispatch` the ufunc and
function dispatch, `jitcore.ops.tensor_methods` the operators and methods, and
`jitcore.torch.lowering` the ATen lowerings. A row whose spelling needs logic of its own
(true division's promotion, where, the decompositions of jitcore.ops.math) is `custom`: its
function is written by hand and registered here with `@implements(name)`.

Adding an elementwise op: its record in ir/ops.py, its emitter in jitcore/llvm/opemit.py,
and one row here (tests/test_spellings.py then tests every spelling of it).

This module holds data and the registry only; it imports nothing of the front.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from jitcore.ir.ops import Op, Typing, info

# dtype groups (numpy names) for Spelling.dtypes
FLOATS = ("float32", "float64")
INTS = ("uint8", "int32", "int64")
NUMERIC = INTS + FLOATS
INTEGRAL = ("bool",) + INTS
ALL = ("bool",) + NUMERIC


@dataclass(frozen=True)
class Spelling:
    """One op's spellings. `op` is the IR op the jc function records (None for a
    decomposition into several); without `custom`, the function is generated from it and
    its record (ir/ops.py: arity, reduction or elementwise)."""
    name: str                       # jc.<name> (and jitcore.ops.core.<name> or .math.<name>)
    doc: str
    op: Op | None = None
    arity: int | None = None        # tensor operands: the op's record's (a reduction: 1);
                                    # given only for a row without an op
    custom: bool = False            # written by hand, registered with @implements(name)
    aliases: tuple = ()             # other jc names of the same function
    ufuncs: tuple = ()              # np.<u>(tracer, ...) calls it
    functions: tuple = ()           # np.<f>(tracer, ...) calls it (__array_function__)
    reduces: tuple = ()             # np.<u>.reduce(tracer, axis=...) calls it
    dunder: str | None = None       # the Python operator __<d>__ ...
    reflected: bool = True          # ... and __r<d>__ (comparisons reflect among themselves)
    method: str | None = None       # tracer.<method>(...) calls it
    aten: tuple = ()                # ATen overloads ("exp.default") with the op's semantics
    torch: str | None = None        # how the lowering calls it: None (by kind: "unary",
                                    # "binary", "compare" for comparisons and logical ops,
                                    # "reduce", "index_reduce"), "predicate" (bool of the
                                    # input), "direct" (the ATen arguments as they are)
    dtypes: tuple = ALL             # the input dtypes on which it gives numpy's values
                                    # (tested); others raise, or follow jitcore's own rule
                                    # (reciprocal of an int is a float)

    def __post_init__(self):
        if self.arity is None:
            record = info(self.op)
            object.__setattr__(self, "arity", 1 if record.reduction else record.arity)

    @property
    def reduction(self) -> bool:
        """numpy's reduction signature (x, axis, keepdims, dtype) and ufunc.reduce."""
        return self.op is not None and info(self.op).reduction

    @property
    def numpy_params(self) -> tuple:
        """A reduction's positional parameters after the array in numpy's own spellings
        (`x.sum(1, np.float64)`, `np.max(x, 0, None, True)`, `np.add.reduce(x, 0)`); jc's
        own function is (x, axis, keepdims, dtype=)."""
        if not self.reduction:
            return ()
        record = info(self.op)
        if record.index_reduction:
            return ("axis", "out")
        if record.typing is Typing.SAME:          # max, min: no dtype parameter
            return ("axis", "out", "keepdims")
        return ("axis", "dtype", "out", "keepdims")

    @property
    def names(self) -> tuple:
        return (self.name,) + self.aliases


def _e(name, op, doc, **kw) -> Spelling:
    """An elementwise op whose jc function is generated (arity from its record)."""
    return Spelling(name, doc, op, **kw)


def _r(name, op, ufunc=None, **kw) -> Spelling:
    doc = f"numpy.{name} over `axis` (None: all axes), optionally keeping reduced axes."
    return Spelling(name, doc, op, functions=(name,) + kw.pop("functions", ()),
                    reduces=(ufunc,) if ufunc else (), method=name, dtypes=kw.pop("dtypes", ALL),
                    **kw)


def _m(name, doc, arity=1, **kw) -> Spelling:
    """A custom spelling of jitcore.ops.math (a decomposition, or a function with logic)."""
    return Spelling(name, doc, kw.pop("op", None), arity=arity, custom=True,
                    ufuncs=kw.pop("ufuncs", (name,)), **kw)


_SHIFT_NOTE = "a count below 0 or of at least the bit width gives"

SPELLINGS: tuple = (
    # ---- unary ops recorded as they are (jitcore.ops.core) --------------------------------
    _e("exp", Op.EXP, "e**x, elementwise.", ufuncs=("exp",), aten=("exp.default",)),
    _e("log", Op.LOG, "Natural logarithm, elementwise.", ufuncs=("log",),
       aten=("log.default",)),
    _e("sqrt", Op.SQRT, "Square root, elementwise.", ufuncs=("sqrt",), aten=("sqrt.default",)),
    _e("rsqrt", Op.RSQRT, "1 / sqrt(x), elementwise.", aten=("rsqrt.default",)),
    _e("abs", Op.ABS, "Absolute value, elementwise.", ufuncs=("absolute",), dunder="abs",
       aten=("abs.default",)),
    _e("neg", Op.NEG, "-x, elementwise.", aliases=("negative",), ufuncs=("negative",),
       dunder="neg", aten=("neg.default",), dtypes=NUMERIC),
    _e("tanh", Op.TANH, "Hyperbolic tangent, elementwise.", ufuncs=("tanh",),
       aten=("tanh.default",)),
    _e("sigmoid", Op.SIGMOID, "1 / (1 + exp(-x)), elementwise.", aten=("sigmoid.default",)),
    _e("relu", Op.RELU, "max(x, 0), elementwise (NaN stays NaN).", aten=("relu.default",),
       dtypes=NUMERIC),
    _e("erf", Op.ERF, "The error function, elementwise.", aten=("erf.default",)),
    _e("sin", Op.SIN, "Sine, elementwise.", ufuncs=("sin",), aten=("sin.default",)),
    _e("cos", Op.COS, "Cosine, elementwise.", ufuncs=("cos",), aten=("cos.default",)),
    _e("floor", Op.FLOOR, "Round towards -inf, elementwise.", ufuncs=("floor",),
       aten=("floor.default",)),
    _e("ceil", Op.CEIL, "Round towards +inf, elementwise.", ufuncs=("ceil",),
       aten=("ceil.default",)),
    _e("reciprocal", Op.RECIPROCAL, "1 / x, elementwise (float dtypes).",
       ufuncs=("reciprocal",), aten=("reciprocal.default",), dtypes=FLOATS),
    _e("logical_not", Op.LOGICAL_NOT, "Logical not, elementwise (result bool).",
       ufuncs=("logical_not",), aten=("logical_not.default",), torch="direct"),
    _e("silu", Op.SILU, "x * sigmoid(x), elementwise.", aten=("silu.default",)),
    _e("hardswish", Op.HARDSWISH, "x * relu6(x + 3) / 6, elementwise.",
       aten=("hardswish.default",)),
    _e("hardsigmoid", Op.HARDSIGMOID, "relu6(x + 3) / 6, elementwise.",
       aten=("hardsigmoid.default",)),
    _e("relu6", Op.RELU6, "min(max(x, 0), 6), elementwise.", dtypes=NUMERIC),
    _e("invert", Op.BITWISE_NOT, "~x: bitwise not of integers, logical not of bools.",
       aliases=("bitwise_not",), ufuncs=("invert",), dunder="invert",
       aten=("bitwise_not.default",), dtypes=INTEGRAL),
    # numpy's math with vector-math kernels of their own (ints converted to float first)
    _e("arctan", Op.ATAN, "Inverse tangent (vector math: fdlibm's reduction and polynomial).",
       ufuncs=("arctan",), aten=("atan.default",)),
    _e("log2", Op.LOG2, "Base-2 logarithm (vector math: the log kernel's pieces times 1/ln 2 "
       "in two parts).", ufuncs=("log2",), aten=("log2.default",)),
    _e("log10", Op.LOG10, "Base-10 logarithm (vector math: as log2).", ufuncs=("log10",),
       aten=("log10.default",)),
    _e("cbrt", Op.CBRT, "Cube root, negative for negative x (vector math: exponent split, "
       "Newton steps).", ufuncs=("cbrt",)),
    _e("log1p", Op.LOG1P, "log(1 + x), accurate for small x (vector math: log of the rounded "
       "1 + x, corrected by its rounding error).", ufuncs=("log1p",), aten=("log1p.default",)),
    _e("expm1", Op.EXPM1, "exp(x) - 1, accurate for small x (vector math: exp's reduction, "
       "2^k*p + (2^k - 1)).", ufuncs=("expm1",), aten=("expm1.default",)),
    _e("sinh", Op.SINH, "Hyperbolic sine (vector math: one exp reduction; expm1's form below "
       "1, exp(|x|)/2 - 1/(2 exp(|x|)) above).", ufuncs=("sinh",), aten=("sinh.default",)),
    _e("cosh", Op.COSH, "Hyperbolic cosine (vector math: h + 1/(4h), h = exp(|x|)/2 scaled "
       "without overflow).", ufuncs=("cosh",), aten=("cosh.default",)),
    _e("exp2", Op.EXP2, "2**x (vector math: 2^round(x) * exp((x - round(x)) * ln2), the "
       "product kept in two parts).", ufuncs=("exp2",), aten=("exp2.default",)),

    # ---- binary ops recorded as they are (jitcore.ops.core) -------------------------------
    _e("add", Op.ADD, "a + b with numpy broadcasting and promotion.", ufuncs=("add",),
       dunder="add"),                       # aten.add: alpha, lowered by hand
    _e("sub", Op.SUB, "a - b.", aliases=("subtract",), ufuncs=("subtract",), dunder="sub",
       dtypes=NUMERIC),                     # aten.sub: alpha, lowered by hand
    _e("mul", Op.MUL, "a * b.", aliases=("multiply",), ufuncs=("multiply",), dunder="mul",
       aten=("mul.Tensor", "mul.Scalar")),
    _e("floor_divide", Op.FLOORDIV, "a // b, rounded toward -inf as numpy (integer division "
       "by zero gives 0, never a trap).", ufuncs=("floor_divide",), dunder="floordiv",
       aten=("floor_divide.default",), dtypes=NUMERIC),
    _e("remainder", Op.MOD, "a % b with the sign of b, as numpy (integer remainder by zero "
       "gives 0).", aliases=("mod",), ufuncs=("remainder",), dunder="mod",
       aten=("remainder.Tensor", "remainder.Scalar"), dtypes=NUMERIC),
    _e("pow", Op.POW, "a ** b.", aliases=("power",), ufuncs=("power",), dunder="pow",
       aten=("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar"), dtypes=NUMERIC),
    _e("maximum", Op.MAXIMUM, "Elementwise maximum; NaN propagates.", ufuncs=("maximum",),
       aten=("maximum.default",)),
    _e("minimum", Op.MINIMUM, "Elementwise minimum; NaN propagates.", ufuncs=("minimum",),
       aten=("minimum.default",)),
    _e("equal", Op.EQ, "a == b (bool).", ufuncs=("equal",), dunder="eq", reflected=False,
       aten=("eq.Tensor", "eq.Scalar")),
    _e("not_equal", Op.NE, "a != b (bool).", ufuncs=("not_equal",), dunder="ne",
       reflected=False, aten=("ne.Tensor", "ne.Scalar")),
    _e("less", Op.LT, "a < b (bool).", ufuncs=("less",), dunder="lt", reflected=False,
       aten=("lt.Tensor", "lt.Scalar")),
    _e("less_equal", Op.LE, "a <= b (bool).", ufuncs=("less_equal",), dunder="le",
       reflected=False, aten=("le.Tensor", "le.Scalar")),
    _e("greater", Op.GT, "a > b (bool).", ufuncs=("greater",), dunder="gt", reflected=False,
       aten=("gt.Tensor", "gt.Scalar")),
    _e("greater_equal", Op.GE, "a >= b (bool).", ufuncs=("greater_equal",), dunder="ge",
       reflected=False, aten=("ge.Tensor", "ge.Scalar")),
    _e("logical_and", Op.LOGICAL_AND, "Logical and (bool).", ufuncs=("logical_and",),
       aten=("logical_and.default",)),
    _e("logical_or", Op.LOGICAL_OR, "Logical or (bool).", ufuncs=("logical_or",),
       aten=("logical_or.default",)),
    # & | ^ are numpy's bitwise ufuncs (on bools they are the logical ops)
    _e("bitwise_and", Op.BITWISE_AND, "a & b on integer or bool dtypes.",
       ufuncs=("bitwise_and",), dunder="and", aten=("bitwise_and.Tensor", "bitwise_and.Scalar"),
       dtypes=INTEGRAL),
    _e("bitwise_or", Op.BITWISE_OR, "a | b on integer or bool dtypes.", ufuncs=("bitwise_or",),
       dunder="or", aten=("bitwise_or.Tensor", "bitwise_or.Scalar"), dtypes=INTEGRAL),
    _e("bitwise_xor", Op.BITWISE_XOR, "a ^ b on integer or bool dtypes.",
       ufuncs=("bitwise_xor",), dunder="xor", aten=("bitwise_xor.Tensor", "bitwise_xor.Scalar"),
       dtypes=INTEGRAL),
    # torch's shifts by a count < 0 or >= the width give 0 (-1: >> of a negative), as jc's
    _e("left_shift", Op.LEFT_SHIFT, f"a << b on integers, wrapping as numpy; {_SHIFT_NOTE} 0.",
       ufuncs=("left_shift",), dunder="lshift",
       aten=("bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar",
             "__lshift__.Scalar", "__lshift__.Tensor"), dtypes=INTS),
    _e("right_shift", Op.RIGHT_SHIFT, "a >> b on integers (arithmetic for signed dtypes); "
       f"{_SHIFT_NOTE} -1 for negative signed values, else 0 (numpy's rule).",
       ufuncs=("right_shift",), dunder="rshift",
       aten=("bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar",
             "__rshift__.Scalar", "__rshift__.Tensor"), dtypes=INTS),

    # ---- ops with logic of their own in jitcore.ops.core ----------------------------------
    Spelling("div", "a / b (true division: integers give float64, as numpy).", Op.DIV,
             custom=True, aliases=("divide",), ufuncs=("divide",), dunder="truediv",
             aten=("div.Tensor", "div.Scalar")),
    Spelling("where", "x where condition is true, else y (numpy.where with three arguments).",
             Op.WHERE, custom=True, functions=("where",)),    # aten: torch's dtypes
    Spelling("gelu", "GELU: x * Phi(x) with the erf form, or the tanh approximation "
             "(approximate=\"tanh\").", Op.GELU, custom=True, aten=("gelu.default",),
             torch="direct"),
    Spelling("leaky_relu", "x if x > 0 else negative_slope * x.", Op.LEAKY_RELU, custom=True,
             aten=("leaky_relu.default",), torch="direct"),
    Spelling("hardtanh", "Clamp to [min_val, max_val].", Op.HARDTANH, custom=True,
             aten=("hardtanh.default",), torch="direct"),
    Spelling("copysign", "|x| with the sign bit of y (of -0.0 and NaN too).", Op.COPYSIGN,
             custom=True, ufuncs=("copysign",),
             aten=("copysign.Tensor", "copysign.Scalar")),
    Spelling("matmul", "numpy.matmul (1-D operands, batch broadcasting).", Op.MATMUL,
             custom=True, ufuncs=("matmul",), functions=("matmul",), dunder="matmul",
             dtypes=NUMERIC),

    # ---- numpy's other math: decompositions in jitcore.ops.math --------------------------
    _m("arcsinh", "Inverse hyperbolic sine.", aten=("asinh.default",)),
    _m("arccosh", "Inverse hyperbolic cosine (NaN below 1).", aten=("acosh.default",)),
    _m("arctanh", "Inverse hyperbolic tangent (+-inf at +-1).", aten=("atanh.default",)),
    _m("arcsin", "Inverse sine (NaN outside [-1, 1]).", aten=("asin.default",)),
    _m("arccos", "Inverse cosine (NaN outside [-1, 1]).", aten=("acos.default",)),
    _m("arctan2", "atan(y / x) in the quadrant of (x, y), numpy's signed zeros and "
       "infinities.", arity=2, aten=("atan2.default",)),
    _m("hypot", "sqrt(x**2 + y**2) without overflow; inf if either is.", arity=2,
       aten=("hypot.default",)),
    _m("logaddexp", "log(exp(x) + exp(y)) without overflow.", arity=2,
       aten=("logaddexp.default",)),
    _m("deg2rad", "Degrees to radians: x * (pi / 180), as numpy computes it.",
       ufuncs=("deg2rad", "radians")),
    _m("rad2deg", "Radians to degrees: x * (180 / pi), as numpy computes it.",
       ufuncs=("rad2deg", "degrees")),
    _m("square", "x * x (integers wrap as numpy).", dtypes=NUMERIC),
    _m("sign", "-1, 0 or 1 by the sign of x (NaN stays NaN; -0.0 gives 0.0).",
       aten=("sign.default",), dtypes=NUMERIC),
    _m("signbit", "True where the sign bit is set (-0.0 and -nan included).",
       aten=("signbit.default",), torch="predicate"),
    _m("isnan", "True where x is NaN (never for integers).", aten=("isnan.default",),
       torch="predicate"),
    _m("isinf", "True where x is +-inf.", aten=("isinf.default",), torch="predicate"),
    _m("isfinite", "True where x is neither NaN nor +-inf."),
    _m("fmax", "Elementwise maximum that ignores NaN (NaN only if both are).", arity=2,
       aten=("fmax.default",)),
    _m("fmin", "Elementwise minimum that ignores NaN (NaN only if both are).", arity=2,
       aten=("fmin.default",)),
    _m("trunc", "Round toward zero (integers unchanged).", functions=("fix",),
       aten=("trunc.default",)),
    _m("rint", "Round to the nearest integer, halves to even (numpy.rint).",
       aten=("round.default",)),            # torch rounds halves to even, as rint
    _m("positive", "+x.", dtypes=NUMERIC),  # the operator +x is x itself, for bools too
    _m("conj", "The complex conjugate: x itself for real dtypes (not bool: numpy gives int8).",
       ufuncs=("conjugate",), dtypes=NUMERIC),
    _m("real", "The real part: x itself for real dtypes.", ufuncs=(), functions=("real",)),
    _m("nan_to_num", "NaN -> nan, +inf -> posinf (default: the dtype's max), -inf -> neginf "
       "(its min).", ufuncs=(), functions=("nan_to_num",)),

    # ---- reductions (jitcore.ops.core; keepdims keeps the reduced axes with size 1) -------
    _r("sum", Op.SUM, "add", aten=("sum.dim_IntList", "sum.default")),
    _r("prod", Op.PROD, "multiply", aten=("prod.dim_int", "prod.default")),
    _r("max", Op.MAX, "maximum", aliases=("amax",), functions=("amax",),
       aten=("amax.default", "max.default")),           # max.dim (values, indices): by hand
    _r("min", Op.MIN, "minimum", aliases=("amin",), functions=("amin",),
       aten=("amin.default", "min.default")),
    _r("mean", Op.MEAN, aten=("mean.dim", "mean.default")),
    _r("argmax", Op.ARGMAX, aten=("argmax.default",)),
    _r("argmin", Op.ARGMIN, aten=("argmin.default",)),
    Spelling("var", "Variance over axis (None: all), divided by n - ddof (numpy.var).",
             arity=1, custom=True, functions=("var",), method="var", dtypes=NUMERIC),
    Spelling("std", "Standard deviation: sqrt(var(...)) (numpy.std).", arity=1, custom=True,
             functions=("std",), method="std", dtypes=NUMERIC),
)

BY_NAME = {s.name: s for s in SPELLINGS}

# name -> the function of each custom row, and of each generated one once jitcore.ops.core made it
_IMPLEMENTATIONS: dict = {}


def implements(name: str) -> Callable:
    """Register fn as the jc function of the row `name` (a custom row's hand-written
    function; jitcore.ops.core registers the generated ones). Sets its name and docstring."""
    row = BY_NAME[name]

    def register(fn):
        if name in _IMPLEMENTATIONS:
            raise ValueError(f"spelling {name!r} is implemented twice")
        fn.__name__, fn.__doc__ = name, row.doc
        _IMPLEMENTATIONS[name] = fn
        return fn
    return register


def implementation(name: str) -> Callable:
    """The jc function of a row (the modules that implement rows must be imported first:
    jitcore.ops.core and jitcore.ops.math)."""
    fn = _IMPLEMENTATIONS.get(name)
    if fn is None:
        raise LookupError(f"spelling {name!r} has no implementation: a custom row needs "
                          "@implements(name) on its function in jitcore.ops.core or .math")
    return fn

