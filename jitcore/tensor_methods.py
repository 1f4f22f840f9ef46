"""The operators and methods of traced tensors (`x + y`, `x.sum(axis=1)`, `x.T`, `x[i]`) and
numpy's protocols on them (`np.exp(x)`), attached to `Tracer` when this module is imported.

They live apart from the Tracer class, as JAX keeps its array methods apart from its tracers:
each one records an op of `jitcore.ops`, which is built on `jitcore.tracer`, so defining them
there would make the two modules import each other. `jitcore.api` imports this module before
it traces anything.
"""
from __future__ import annotations

from jitcore.ir import build
from jitcore.ir import dtypes as dt

from . import join_ops, math_ops, ops
from .numpy_compat import apply_function, apply_ufunc
from .tracer import Tracer, WeakScalar, is_weak

class TensorMethods:
    """What a traced tensor answers besides its static facts; copied onto Tracer below."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return apply_function(func, args, kwargs)

    def sum(self, axis=None, keepdims=False, dtype=None):
        return ops.sum(self, axis, keepdims=keepdims, dtype=dtype)

    def mean(self, axis=None, keepdims=False):
        return ops.mean(self, axis, keepdims=keepdims)

    def prod(self, axis=None, keepdims=False):
        return ops.prod(self, axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return ops.max(self, axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return ops.min(self, axis, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False):
        return ops.argmax(self, axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False):
        return ops.argmin(self, axis, keepdims=keepdims)

    def reshape(self, *shape):
        return ops.reshape(self, shape[0] if len(shape) == 1 else shape)

    def transpose(self, *axes):
        return ops.transpose(self, (axes[0] if len(axes) == 1 else axes) or None)

    @property
    def T(self):
        return ops.transpose(self)

    def astype(self, dtype):
        return ops.astype(self, dtype)

    def broadcast_to(self, shape):
        return ops.broadcast_to(self, shape)

    def __getitem__(self, index):
        return ops.getitem(self, index)

    # indexing and joining (jitcore/join_ops.py)
    def clip(self, min=None, max=None, **kwargs):   # noqa: A002 -- numpy's names
        return join_ops.clip(self, min, max, **kwargs)

    def cumsum(self, axis=None, dtype=None):
        return join_ops.cumsum(self, axis, dtype=dtype)

    def take(self, indices, axis=None):
        return join_ops.take(self, indices, axis)


for _name, _member in vars(TensorMethods).items():
    if not _name.startswith("__") or _name in ("__array_ufunc__", "__array_function__",
                                               "__getitem__"):
        setattr(Tracer, _name, _member)


_PYTYPE = {"b": bool, "u": int, "i": int, "f": float}
# Python's arithmetic on bools gives ints (True + True == 2); its & | ^ give bools
_BOOL_KEEPING = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "equal", "not_equal",
                           "less", "less_equal", "greater", "greater_equal"})


def _as_python_result(x: Tracer) -> Tracer:
    """An operator applied to Python scalars only gives a Python scalar: weak again."""
    return Tracer(x.node, WeakScalar(_PYTYPE[x.node.dtype.kind]))


def _python_bool_as_int(x):
    if isinstance(x, Tracer) and x.node.dtype == dt.bool_:
        return Tracer(build.cast(x.node, dt.int64), WeakScalar(int))
    return x


def _binary(name, reflected=False):
    fn = getattr(ops, name)

    def method(self, other):
        x, y = (other, self) if reflected else (self, other)
        if self.weak is None or not is_weak(other):
            return fn(x, y)
        # both Python scalars (at least one a scalar argument): Python's operator rules
        if name not in _BOOL_KEEPING:
            x, y = _python_bool_as_int(x), _python_bool_as_int(y)
        return _as_python_result(fn(x, y))
    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


def _unary(name):
    fn = getattr(ops, name)

    def method(self):
        if self.weak is None:
            return fn(self)
        return _as_python_result(fn(_python_bool_as_int(self)))
    method.__name__ = f"__{name}__"
    return method


# & | ^ ~ are numpy's bitwise ufuncs (on bools they are the logical ops), never logical_and
for _dunder, _fn in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                     ("floordiv", "floor_divide"), ("mod", "remainder"), ("pow", "pow"),
                     ("matmul", "matmul"), ("and", "bitwise_and"), ("or", "bitwise_or"),
                     ("xor", "bitwise_xor"), ("lshift", "left_shift"),
                     ("rshift", "right_shift")]:
    setattr(Tracer, f"__{_dunder}__", _binary(_fn))
    setattr(Tracer, f"__r{_dunder}__", _binary(_fn, reflected=True))
for _dunder, _fn in [("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
                     ("gt", "greater"), ("ge", "greater_equal")]:
    setattr(Tracer, f"__{_dunder}__", _binary(_fn))
Tracer.__neg__ = _unary("neg")
Tracer.__pos__ = lambda self: self
Tracer.__abs__ = _unary("abs")
Tracer.__invert__ = _unary("invert")


# ---- numpy's statistics methods (jitcore/math_ops.py) ----------------------------------------
def _var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    return math_ops.var(self, axis, dtype, out, ddof, keepdims)


def _std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    return math_ops.std(self, axis, dtype, out, ddof, keepdims)


Tracer.var, Tracer.std = _var, _std
Tracer.conj = Tracer.conjugate = lambda self: self
Tracer.real = property(lambda self: self)
