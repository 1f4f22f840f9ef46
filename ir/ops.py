"""The op set of the tensor IR: one enum, and one record per op (`OpInfo`, `info(op)`).

The record is the only place an op is classified: its arity, typing rule, constant fold,
cost, kind and algebraic properties. Passes read the record; the op groups exported below
(`ELEMENTWISE`, `REDUCE`, ...) are computed from the records, never spelled by hand.
Adding an op: its enum member and its record here; a composite also registers its rule
with `@passes.decompose.decomposes(op)`, an elementwise primitive its LLVM emitter in
`jitcore.llvm.opemit.EMITTERS` (or, named like a `jitcore.llvm.vecmath` function, its math
there); tests/test_op_registry.py then puts it under test.

The IR is explicit: elementwise ops take sources of one shape and (for arithmetic) one
dtype; the builder (`ir.build`) inserts `EXPAND` and `CAST` nodes to get there, so passes
and lowering never re-derive broadcasting or promotion. Reductions always keep their
reduced axes (size 1); dropping them is a `RESHAPE`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Callable

import numpy as np

from . import dtypes as dt


class Op(Enum):
    # leaves
    INPUT = auto()
    CONST = auto()
    # the run-time value of an extent (arg: c times a product of placeholders, ir/sizes.py):
    # a size Python used as a value in a dynamic trace; int64, shape ()
    DIM = auto()
    # unary elementwise primitives
    NEG = auto(); ABS = auto(); EXP = auto(); LOG = auto(); SQRT = auto(); TANH = auto()
    ERF = auto(); SIN = auto(); COS = auto(); FLOOR = auto(); CEIL = auto()
    LOGICAL_NOT = auto(); CAST = auto(); BITWISE_NOT = auto(); ATAN = auto()
    # numpy's math with kernels of their own in the vector math (jitcore.ops.math uses them)
    CBRT = auto(); EXPM1 = auto(); LOG1P = auto(); LOG2 = auto(); LOG10 = auto()
    EXP2 = auto(); SINH = auto(); COSH = auto()
    # a kernel of its own in the vector math too (cheaper than its formula in exp and a
    # divide: exp's argument, -|x|, is never positive)
    SIGMOID = auto()
    # unary composites (decomposed into primitives by passes.decompose)
    RSQRT = auto(); RECIPROCAL = auto(); RELU = auto(); GELU = auto()
    SILU = auto(); HARDTANH = auto(); HARDSWISH = auto(); HARDSIGMOID = auto()
    LEAKY_RELU = auto(); RELU6 = auto()
    # binary elementwise
    ADD = auto(); SUB = auto(); MUL = auto(); DIV = auto(); POW = auto()
    FLOORDIV = auto(); MOD = auto()
    MAXIMUM = auto(); MINIMUM = auto()
    EQ = auto(); NE = auto(); LT = auto(); LE = auto(); GT = auto(); GE = auto()
    LOGICAL_AND = auto(); LOGICAL_OR = auto()
    BITWISE_AND = auto(); BITWISE_OR = auto(); BITWISE_XOR = auto()
    LEFT_SHIFT = auto(); RIGHT_SHIFT = auto()
    COPYSIGN = auto()
    # ternary
    WHERE = auto()
    # reductions (arg: sorted tuple of axes; the result keeps them with size 1)
    SUM = auto(); PROD = auto(); MAX = auto(); MIN = auto(); ARGMAX = auto(); ARGMIN = auto()
    MEAN = auto()
    # views (no data movement: lowering turns them into index arithmetic)
    RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); SLICE = auto()
    # contractions and row-wise composites
    MATMUL = auto(); SOFTMAX = auto(); LOG_SOFTMAX = auto(); LAYER_NORM = auto()
    # windowed reductions (arg: an ir.pooling.Pool2d) over the last two axes of (N, C, H, W)
    POOL2D = auto()
    # convolution (src: x NCHW, weight OIHW[, bias O]; arg: ir.conv.ConvAttrs) and the
    # inference batch norm over axis 1 (src: x, mean, var[, weight][, bias]; arg:
    # (eps, has_weight, has_bias)), a composite
    CONV2D = auto(); BATCH_NORM = auto()
    # inter-op tasks (arg: task number): identities that mark where a forked sub-graph reads
    # its arguments (FORKARG) and where the caller waits for its results (WAIT)
    FORKARG = auto(); WAIT = auto()
    # indexing and joining (arg: the axis). TAKE gathers src[0] along the axis at the run-time
    # integer indices src[1] (checked: an index out of range is an error, never a stray read);
    # CONCAT joins its sources along the axis; CUMSUM is the running sum along the axis
    TAKE = auto(); CONCAT = auto(); CUMSUM = auto()

    def __repr__(self) -> str:
        return self.name.lower()



class OpKind(Enum):
    """What an op does to its sources' elements (one per op)."""
    LEAF = auto()           # no sources: a graph input, a constant, a run-time extent
    ELEMENTWISE = auto()    # sources of one shape, one result element per index
    REDUCTION = auto()      # combines the elements along axes (arg), keeping them with size 1
    VIEW = auto()           # no data movement: lowering turns it into index arithmetic
    TASK_BOUNDARY = auto()  # an identity that marks where a forked task reads or is waited on
    AXIS = auto()           # indexes, joins or scans along one axis (arg)
    CONTRACTION = auto()    # an accumulator kernel with a fused epilogue (matmul, conv)
    WINDOW = auto()         # a windowed reduction (pooling)
    ROWS = auto()           # a composite over whole rows or channels (softmax, layer norm, ...)


class Typing(Enum):
    """How an op's result dtype follows from its sources' dtype (after `ir.build` brought
    the sources to one dtype). `admits(d)` says whether the op takes sources of dtype d,
    `result(d, arg)` the dtype it gives for them."""
    SAME = "any dtype; the result has the sources' dtype"
    NUMERIC = "any dtype but bool (numpy rejects it); the result has the sources' dtype"
    FLOAT = "float sources (ir.build converts integers with dtypes.float_result first)"
    TRUE_DIVIDE = "float sources (ir.build divides integers in float64, as numpy does)"
    BOOL = "bool sources and result (ir.build converts the sources to bool first)"
    INTEGRAL = "integer or bool sources (floats are a type error); the result has their dtype"
    INT = "integer sources only (numpy shifts bools as int8, which jitcore lacks)"
    COMPARE = "sources of one dtype; a bool result"
    SELECT = "a bool condition and two sources of one dtype; the result has theirs"
    CAST = "the dtype named by the op's arg"
    ACCUMULATE = "floats keep their dtype; integers and bool accumulate in int64"
    AVERAGE = "floats keep their dtype; integers and bool give float64"
    INDEX = "int64 positions"
    OWN = "a rule of the op's own in ir.build (views, contractions, axis ops, ...)"

    def admits(self, d: dt.DType) -> bool:
        """Whether the op takes sources (the value sources of SELECT) of dtype d."""
        if self is Typing.NUMERIC:
            return d != dt.bool_
        if self in (Typing.FLOAT, Typing.TRUE_DIVIDE):
            return d.is_float
        if self is Typing.BOOL:
            return d == dt.bool_
        if self is Typing.INTEGRAL:
            return d.is_int or d == dt.bool_
        if self is Typing.INT:
            return d.is_int
        return True

    def result(self, d: dt.DType, arg=None) -> dt.DType:
        """The result dtype for sources of dtype d (CAST: the arg)."""
        if self in (Typing.COMPARE, Typing.BOOL):
            return dt.bool_
        if self is Typing.CAST:
            return arg
        if self is Typing.ACCUMULATE:
            return dt.sum_result(d)
        if self is Typing.AVERAGE:
            return d if d.is_float else dt.float64
        if self is Typing.INDEX:
            return dt.int64
        return d


VARIADIC = None     # the arity of an op that takes a varying number of sources

# cost (OpInfo.cost) from which an op counts as expensive: vector math, tens of instructions
EXPENSIVE_COST = 20


@dataclass(frozen=True)
class OpInfo:
    """Everything the compiler knows about one op, apart from how it is emitted."""
    op: Op
    kind: OpKind
    arity: int | None                 # number of sources; VARIADIC (None) when it varies
    typing: Typing = Typing.OWN
    # the numpy function computing the op on constants (simplify folds with it); None: no fold
    fold: Callable | None = None
    # a rough instruction count of one evaluation per element (codegen's unroll decisions;
    # EXPENSIVE_COST and up marks the vector-math ops that fusion avoids recomputing)
    cost: int = 1
    # decomposed into primitives by passes.decompose (its rule registers there)
    composite: bool = False
    # reductions: the binary op combining two partial results, and its identity (None: the
    # reduction has no identity, an empty one is an error)
    combine: Op | None = None
    identity: int | None = None
    # binary ops whose result is always one of the sources (max/min of an order): they
    # commute with a max pooling of either source
    selects: bool = False
    # a run-time extent of a source stays an axis of its own in the result (dynamic shapes)
    keeps_axes: bool = False
    # how the printer names the op's arg (views: shape, reductions: axes, ...)
    arg_name: str = "axes"

    name: str = field(init=False)       # the op's name in lower case (the printer's)

    def __post_init__(self):
        object.__setattr__(self, "name", self.op.name.lower())

    @property
    def elementwise(self) -> bool:
        return self.kind is OpKind.ELEMENTWISE

    @property
    def unary(self) -> bool:
        return self.elementwise and self.arity == 1

    @property
    def binary(self) -> bool:
        return self.elementwise and self.arity == 2

    @property
    def ternary(self) -> bool:
        return self.elementwise and self.arity == 3

    @property
    def reduction(self) -> bool:
        return self.kind is OpKind.REDUCTION

    @property
    def index_reduction(self) -> bool:
        return self.reduction and self.typing is Typing.INDEX

    @property
    def view(self) -> bool:
        return self.kind is OpKind.VIEW

    @property
    def leaf(self) -> bool:
        return self.kind is OpKind.LEAF

    @property
    def task_boundary(self) -> bool:
        return self.kind is OpKind.TASK_BOUNDARY

    @property
    def axis_op(self) -> bool:
        return self.kind is OpKind.AXIS

    @property
    def contraction(self) -> bool:
        return self.kind is OpKind.CONTRACTION

    @property
    def bitwise(self) -> bool:
        """numpy's bitwise ufuncs and shifts: integer (and bool) operands only."""
        return self.elementwise and self.typing in (Typing.INTEGRAL, Typing.INT)

    @property
    def compare(self) -> bool:
        return self.typing is Typing.COMPARE

    @property
    def logical(self) -> bool:
        return self.typing is Typing.BOOL

    @property
    def expensive(self) -> bool:
        """Vector math (exp, tanh, pow, ...): tens of instructions per element."""
        return self.cost >= EXPENSIVE_COST


def _leaf(op):
    return OpInfo(op, OpKind.LEAF, 0)


def _ew(op, arity, typing, fold=None, cost=1, **kw):
    return OpInfo(op, OpKind.ELEMENTWISE, arity, typing, fold, cost, keeps_axes=True, **kw)


def _composite(op, typing, arg_name="axes"):
    return OpInfo(op, OpKind.ELEMENTWISE, 1, typing, composite=True, keeps_axes=True,
                  arg_name=arg_name)


def _reduce(op, typing, combine=None, identity=None, composite=False):
    return OpInfo(op, OpKind.REDUCTION, 1, typing, combine=combine, identity=identity,
                  composite=composite, keeps_axes=True)


T = Typing
_RECORDS = (
    _leaf(Op.INPUT), _leaf(Op.CONST), _leaf(Op.DIM),
    # unary primitives
    _ew(Op.NEG, 1, T.NUMERIC, np.negative),
    _ew(Op.ABS, 1, T.SAME, np.abs),
    _ew(Op.EXP, 1, T.FLOAT, np.exp, cost=20),
    _ew(Op.LOG, 1, T.FLOAT, np.log, cost=20),
    _ew(Op.SQRT, 1, T.FLOAT, np.sqrt),
    _ew(Op.TANH, 1, T.FLOAT, np.tanh, cost=25),
    _ew(Op.ERF, 1, T.FLOAT, None, cost=30),          # numpy has no erf: not folded
    _ew(Op.SIN, 1, T.FLOAT, np.sin, cost=25),
    _ew(Op.COS, 1, T.FLOAT, np.cos, cost=25),
    _ew(Op.FLOOR, 1, T.SAME, np.floor),
    _ew(Op.CEIL, 1, T.SAME, np.ceil),
    _ew(Op.LOGICAL_NOT, 1, T.BOOL, np.logical_not),
    _ew(Op.CAST, 1, T.CAST),                         # folded with dtypes.convert (simplify)
    _ew(Op.BITWISE_NOT, 1, T.INTEGRAL, np.invert),
    _ew(Op.ATAN, 1, T.FLOAT, np.arctan, cost=35),
    _ew(Op.CBRT, 1, T.FLOAT, np.cbrt, cost=25),
    _ew(Op.EXPM1, 1, T.FLOAT, np.expm1, cost=25),
    _ew(Op.LOG1P, 1, T.FLOAT, np.log1p, cost=25),
    _ew(Op.LOG2, 1, T.FLOAT, np.log2, cost=20),
    _ew(Op.LOG10, 1, T.FLOAT, np.log10, cost=20),
    _ew(Op.EXP2, 1, T.FLOAT, np.exp2, cost=25),
    _ew(Op.SINH, 1, T.FLOAT, np.sinh, cost=30),
    _ew(Op.COSH, 1, T.FLOAT, np.cosh, cost=30),
    _ew(Op.SIGMOID, 1, T.FLOAT, None, cost=25),     # not folded (numpy has no sigmoid)
    # unary composites
    _composite(Op.RSQRT, T.FLOAT), _composite(Op.RECIPROCAL, T.FLOAT),
    _composite(Op.RELU, T.NUMERIC),
    _composite(Op.GELU, T.FLOAT, "approximate"), _composite(Op.SILU, T.FLOAT),
    _composite(Op.HARDTANH, T.FLOAT, "range"), _composite(Op.HARDSWISH, T.FLOAT),
    _composite(Op.HARDSIGMOID, T.FLOAT), _composite(Op.LEAKY_RELU, T.FLOAT, "slope"),
    _composite(Op.RELU6, T.NUMERIC),
    # binary
    _ew(Op.ADD, 2, T.SAME, np.add),
    _ew(Op.SUB, 2, T.NUMERIC, np.subtract),      # numpy: bool - bool is an error
    _ew(Op.MUL, 2, T.SAME, np.multiply),
    _ew(Op.DIV, 2, T.TRUE_DIVIDE, np.divide),
    # numpy: bool ** bool, bool // bool and bool % bool are int8, which jitcore lacks
    _ew(Op.POW, 2, T.NUMERIC, np.power, cost=40),
    _ew(Op.FLOORDIV, 2, T.NUMERIC, np.floor_divide),
    _ew(Op.MOD, 2, T.NUMERIC, np.remainder),
    _ew(Op.MAXIMUM, 2, T.SAME, np.maximum, selects=True),
    _ew(Op.MINIMUM, 2, T.SAME, np.minimum, selects=True),
    _ew(Op.EQ, 2, T.COMPARE, np.equal), _ew(Op.NE, 2, T.COMPARE, np.not_equal),
    _ew(Op.LT, 2, T.COMPARE, np.less), _ew(Op.LE, 2, T.COMPARE, np.less_equal),
    _ew(Op.GT, 2, T.COMPARE, np.greater), _ew(Op.GE, 2, T.COMPARE, np.greater_equal),
    _ew(Op.LOGICAL_AND, 2, T.BOOL, np.logical_and),
    _ew(Op.LOGICAL_OR, 2, T.BOOL, np.logical_or),
    _ew(Op.BITWISE_AND, 2, T.INTEGRAL, np.bitwise_and),
    _ew(Op.BITWISE_OR, 2, T.INTEGRAL, np.bitwise_or),
    _ew(Op.BITWISE_XOR, 2, T.INTEGRAL, np.bitwise_xor),
    _ew(Op.LEFT_SHIFT, 2, T.INT, np.left_shift),
    _ew(Op.RIGHT_SHIFT, 2, T.INT, np.right_shift),
    _ew(Op.COPYSIGN, 2, T.FLOAT, np.copysign),
    # ternary
    _ew(Op.WHERE, 3, T.SELECT, np.where),
    # reductions
    _reduce(Op.SUM, T.ACCUMULATE, Op.ADD, 0),
    _reduce(Op.PROD, T.ACCUMULATE, Op.MUL, 1),
    _reduce(Op.MAX, T.SAME, Op.MAXIMUM),
    _reduce(Op.MIN, T.SAME, Op.MINIMUM),
    _reduce(Op.ARGMAX, T.INDEX), _reduce(Op.ARGMIN, T.INDEX),
    _reduce(Op.MEAN, T.AVERAGE, composite=True),     # sum / count: empty gives nan
    # views
    OpInfo(Op.RESHAPE, OpKind.VIEW, 1, arg_name="shape"),
    OpInfo(Op.PERMUTE, OpKind.VIEW, 1, arg_name="perm", keeps_axes=True),
    OpInfo(Op.EXPAND, OpKind.VIEW, 1, arg_name="shape", keeps_axes=True),
    OpInfo(Op.SLICE, OpKind.VIEW, 1, arg_name="slices"),
    # contractions and row-wise composites
    OpInfo(Op.MATMUL, OpKind.CONTRACTION, 2, keeps_axes=True),
    OpInfo(Op.SOFTMAX, OpKind.ROWS, 1, T.FLOAT, composite=True, arg_name="axis"),
    OpInfo(Op.LOG_SOFTMAX, OpKind.ROWS, 1, T.FLOAT, composite=True, arg_name="axis"),
    OpInfo(Op.LAYER_NORM, OpKind.ROWS, VARIADIC, T.FLOAT, composite=True, arg_name="eps"),
    OpInfo(Op.POOL2D, OpKind.WINDOW, 1, T.FLOAT, arg_name="pool"),
    OpInfo(Op.CONV2D, OpKind.CONTRACTION, VARIADIC, arg_name="conv"),
    OpInfo(Op.BATCH_NORM, OpKind.ROWS, VARIADIC, T.FLOAT, composite=True,
           arg_name="eps,weight,bias"),
    OpInfo(Op.FORKARG, OpKind.TASK_BOUNDARY, 1, T.SAME, arg_name="task"),
    OpInfo(Op.WAIT, OpKind.TASK_BOUNDARY, 1, T.SAME, arg_name="task"),
    OpInfo(Op.TAKE, OpKind.AXIS, 2, arg_name="axis"),
    OpInfo(Op.CONCAT, OpKind.AXIS, VARIADIC, arg_name="axis"),
    OpInfo(Op.CUMSUM, OpKind.AXIS, 1, arg_name="axis"),
)
del T

OP_INFO: dict = {r.op: r for r in _RECORDS}
assert len(OP_INFO) == len(_RECORDS) and set(OP_INFO) == set(Op), \
    f"ops without a record: {set(Op) - set(OP_INFO)}"


# info(op) -> the record of op (the dict's own lookup: passes call it for every node)
info = OP_INFO.__getitem__


def ops_where(pred) -> frozenset:
    """The ops whose record satisfies `pred(record)`."""
    return frozenset(r.op for r in _RECORDS if pred(r))


# ---- groups computed from the records (kept for the code that imports them) ---------------

ELEMENTWISE = ops_where(lambda r: r.elementwise)
COMPARE = ops_where(lambda r: r.compare)
# integer and bool sources only (numpy's bitwise ufuncs)
BITWISE_BINARY = ops_where(lambda r: r.binary and r.typing is Typing.INTEGRAL)
REDUCE = ops_where(lambda r: r.reduction)
INDEX_REDUCE = ops_where(lambda r: r.index_reduction)
VIEW = ops_where(lambda r: r.view)
COMPOSITE = ops_where(lambda r: r.composite)
LEAF = ops_where(lambda r: r.leaf)
TASK_BOUNDARY = ops_where(lambda r: r.task_boundary)
# ops whose evaluation costs tens of instructions (vector math), for fusion decisions
TRANSCENDENTAL = ops_where(lambda r: r.expensive)
# the binary op that combines two partial results of a reduction
REDUCE_COMBINE = {r.op: r.combine for r in _RECORDS if r.combine is not None}
