"""The op set of the tensor IR: one enum, and op groups as frozensets.

The IR is explicit: elementwise ops take sources of one shape and (for arithmetic) one
dtype; the builder (`ir.build`) inserts `EXPAND` and `CAST` nodes to get there, so passes
and lowering never re-derive broadcasting or promotion. Reductions always keep their
reduced axes (size 1); dropping them is a `RESHAPE`.
"""
from enum import Enum, auto


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
    # numpy's math with kernels of their own in the vector math (jitcore.math_ops uses them)
    CBRT = auto(); EXPM1 = auto(); LOG1P = auto(); LOG2 = auto(); LOG10 = auto()
    EXP2 = auto(); SINH = auto(); COSH = auto()
    # unary composites (decomposed into primitives by passes.decompose)
    RSQRT = auto(); RECIPROCAL = auto(); SIGMOID = auto(); RELU = auto(); GELU = auto()
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


UNARY_PRIMITIVE = frozenset({Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.ERF, Op.SIN,
                             Op.COS, Op.FLOOR, Op.CEIL, Op.LOGICAL_NOT, Op.CAST,
                             Op.BITWISE_NOT, Op.ATAN, Op.CBRT, Op.EXPM1, Op.LOG1P, Op.LOG2,
                             Op.LOG10, Op.EXP2, Op.SINH, Op.COSH})
UNARY_COMPOSITE = frozenset({Op.RSQRT, Op.RECIPROCAL, Op.SIGMOID, Op.RELU, Op.GELU, Op.SILU,
                             Op.HARDTANH, Op.HARDSWISH, Op.HARDSIGMOID, Op.LEAKY_RELU, Op.RELU6})
UNARY = UNARY_PRIMITIVE | UNARY_COMPOSITE
# unary ops whose result is always floating point (ints are converted first)
FLOAT_UNARY = frozenset({Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.ERF, Op.SIN, Op.COS, Op.ATAN,
                         Op.CBRT, Op.EXPM1, Op.LOG1P, Op.LOG2, Op.LOG10, Op.EXP2,
                         Op.SINH, Op.COSH, Op.RSQRT,
                         Op.RECIPROCAL, Op.SIGMOID, Op.GELU, Op.SILU, Op.HARDSWISH,
                         Op.HARDSIGMOID, Op.HARDTANH, Op.LEAKY_RELU})
ARITH_BINARY = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.FLOORDIV, Op.MOD,
                          Op.MAXIMUM, Op.MINIMUM})
COMPARE = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE})
LOGICAL_BINARY = frozenset({Op.LOGICAL_AND, Op.LOGICAL_OR})
# integer and bool sources only (numpy's bitwise ufuncs); shifts take integers only
BITWISE_BINARY = frozenset({Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR})
SHIFT = frozenset({Op.LEFT_SHIFT, Op.RIGHT_SHIFT})
# float sources only
FLOAT_BINARY = frozenset({Op.COPYSIGN})
BINARY = ARITH_BINARY | COMPARE | LOGICAL_BINARY | BITWISE_BINARY | SHIFT | FLOAT_BINARY
BITWISE = BITWISE_BINARY | SHIFT | {Op.BITWISE_NOT}
ELEMENTWISE = UNARY | BINARY | {Op.WHERE}
REDUCE = frozenset({Op.SUM, Op.PROD, Op.MAX, Op.MIN, Op.ARGMAX, Op.ARGMIN, Op.MEAN})
INDEX_REDUCE = frozenset({Op.ARGMAX, Op.ARGMIN})
VIEW = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SLICE})
COMPOSITE = UNARY_COMPOSITE | {Op.MEAN, Op.MATMUL, Op.SOFTMAX, Op.LOG_SOFTMAX, Op.LAYER_NORM,
                                 Op.BATCH_NORM}
LEAF = frozenset({Op.INPUT, Op.CONST, Op.DIM})
# ops whose evaluation costs tens of instructions (vector math), for fusion decisions
TRANSCENDENTAL = frozenset({Op.EXP, Op.LOG, Op.TANH, Op.ERF, Op.SIN, Op.COS, Op.POW,
                            Op.ATAN, Op.CBRT, Op.EXPM1, Op.LOG1P, Op.LOG2, Op.LOG10,
                            Op.EXP2, Op.SINH, Op.COSH})
# the binary op that combines two partial results of a reduction
REDUCE_COMBINE = {Op.SUM: Op.ADD, Op.PROD: Op.MUL, Op.MAX: Op.MAXIMUM, Op.MIN: Op.MINIMUM}
TASK_BOUNDARY = frozenset({Op.FORKARG, Op.WAIT})
AXIS_OPS = frozenset({Op.TAKE, Op.CONCAT, Op.CUMSUM})
