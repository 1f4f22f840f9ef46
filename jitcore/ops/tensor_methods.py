"""The operators and methods of traced tensors (`x + y`, `x.sum(axis=1)`, `x.T`, `x[i]`) and
numpy's protocols on them (`np.exp(x)`), attached to `Tracer` when this module is imported.
The operators and methods that spell one op are made from its row of the spelling table
(jitcore/ops/spellings.py); the rest (views, indexing, astype, clip, ...) are written here.

They live apart from the Tracer class, as JAX keeps its array methods apart from its tracers:
each one records an op of `jitcore.ops.core`, which is built on `jitcore.ops.tracer`, so
defining them there would make the two modules import each other. `jitcore.api` imports this
module before it traces anything.
"""
from __future__ import annotations

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.ops import BITWISE_BINARY, COMPARE

from . import core, join
from .numpy_dispatch import apply_function, apply_ufunc, in_numpy_order
from .spellings import SPELLINGS, Spelling, implementation
from .tracer import Tracer, WeakScalar, is_weak


class TensorMethods:
    """What a traced tensor answers besides its static facts; copied onto Tracer below."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return apply_function(func, args, kwargs)

    def reshape(self, *shape):
        return core.reshape(self, shape[0] if len(shape) == 1 else shape)

    def transpose(self, *axes):
        return core.transpose(self, (axes[0] if len(axes) == 1 else axes) or None)

    @property
    def T(self):
        return core.transpose(self)

    def astype(self, dtype):
        return core.astype(self, dtype)

    def broadcast_to(self, shape):
        return core.broadcast_to(self, shape)

    def __getitem__(self, index):
        return core.getitem(self, index)

    # indexing and joining (jitcore/ops/join.py)
    def clip(self, min=None, max=None, **kwargs):   # noqa: A002 -- numpy's names
        return join.clip(self, min, max, **kwargs)

    def cumsum(self, axis=None, dtype=None):
        return join.cumsum(self, axis, dtype=dtype)

    def take(self, indices, axis=None):
        return join.take(self, indices, axis)


for _name, _member in vars(TensorMethods).items():
    if not _name.startswith("__") or _name in ("__array_ufunc__", "__array_function__",
                                               "__getitem__"):
        setattr(Tracer, _name, _member)


_PYTYPE = {"b": bool, "u": int, "i": int, "f": float}
# Python's arithmetic on bools gives ints (True + True == 2); its & | ^ give bools
_BOOL_KEEPING = COMPARE | BITWISE_BINARY


def _as_python_result(x: Tracer) -> Tracer:
    """An operator applied to Python scalars only gives a Python scalar: weak again."""
    return Tracer(x.node, WeakScalar(_PYTYPE[x.node.dtype.kind]))


def _python_bool_as_int(x):
    if isinstance(x, Tracer) and x.node.dtype == dt.bool_:
        return Tracer(build.cast(x.node, dt.int64), WeakScalar(int))
    return x


def _binary(row: Spelling, reflected: bool):
    fn = implementation(row.name)
    bool_keeping = row.op in _BOOL_KEEPING

    def method(self, other):
        x, y = (other, self) if reflected else (self, other)
        if self.weak is None or not is_weak(other):
            return fn(x, y)
        # both Python scalars (at least one a scalar argument): Python's operator rules
        if not bool_keeping:
            x, y = _python_bool_as_int(x), _python_bool_as_int(y)
        return _as_python_result(fn(x, y))
    method.__name__ = f"__{'r' if reflected else ''}{row.dunder}__"
    return method


def _unary(row: Spelling):
    fn = implementation(row.name)

    def method(self):
        if self.weak is None:
            return fn(self)
        return _as_python_result(fn(_python_bool_as_int(self)))
    method.__name__ = f"__{row.dunder}__"
    return method


def _method(row: Spelling):
    fn = in_numpy_order(implementation(row.name), row)      # x.sum(axis, dtype, out, ...)

    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    method.__name__ = row.method
    method.__doc__ = f"jc.{row.name}(self, ...): {row.doc}"
    return method


# the operators and methods of the spelling table: x + y, 2 ** x, ~x, x.sum(axis=1), ...
for _row in SPELLINGS:
    if _row.dunder is not None and _row.arity == 1:
        setattr(Tracer, f"__{_row.dunder}__", _unary(_row))
    elif _row.dunder is not None:
        setattr(Tracer, f"__{_row.dunder}__", _binary(_row, reflected=False))
        if _row.reflected:
            setattr(Tracer, f"__r{_row.dunder}__", _binary(_row, reflected=True))
    if _row.method is not None:
        setattr(Tracer, _row.method, _method(_row))
# +x is x itself, for bools too (jc.positive, numpy's ufunc, rejects bools); the complex
# conjugate and real part of a real tensor are the tensor
Tracer.__pos__ = lambda self: self
Tracer.conj = Tracer.conjugate = lambda self: self
Tracer.real = property(lambda self: self)
