"""Eager calls: `jc.exp(array)` outside a jitted function jits the op for that signature.

This module sits above the public API (it jits); importing it installs `run_eagerly` as the
op namespace's runner (`jitcore.ops.core.set_eager_runner`). A call whose arguments are all
ndarrays (no keywords) also registers its jitted op in `jitcore.ops.core.EAGER_ARRAY_CALLS`, so the
op's next such calls skip the key building here and go straight to the jitted function, whose
native fast path checks dtypes, shapes and strides (one compile per signature)."""
from __future__ import annotations

import sys
import threading

import numpy as np

from jitcore.runtime.forksafe import renew_in_child

from .api import jit
from .cache.lru import LRU
from .ops import core

_CACHE = LRU()                         # key -> the jitted op
_LOCK = threading.Lock()
renew_in_child(sys.modules[__name__], "_LOCK")


def _is_tensor_arg(a) -> bool:
    # a tuple of ints (and None: `output_size=(None, 7)`) is a static shape-like argument
    return isinstance(a, (np.ndarray, list, tuple, np.generic)) and not (
        isinstance(a, tuple) and all(isinstance(x, int) or x is None for x in a))


def run_eagerly(public, fn, args: tuple, kwargs: dict):
    """Run `fn(*args, **kwargs)` compiled: array arguments become inputs; everything else
    (Python scalars, axes, shapes, flags) is baked into the traced function."""
    positions = tuple(i for i, a in enumerate(args) if _is_tensor_arg(a))
    # types are part of the key: 1, 1.0 and True are equal but promote differently
    static = tuple((i, type(a), a) for i, a in enumerate(args) if i not in positions)
    try:
        key = (public, positions, static,
               tuple(sorted((k, type(v), v) for k, v in kwargs.items())))
        hash(key)
    except TypeError:
        key = None
    with _LOCK:
        jitted = _CACHE.lookup(key) if key is not None else None
    if jitted is None:
        template = [None if i in positions else a for i, a in enumerate(args)]

        def traced(*arrays):
            full = list(template)
            for p, a in zip(positions, arrays):
                full[p] = a
            return fn(*full, **kwargs)
        traced.__name__ = fn.__name__
        jitted = jit(traced)
        if key is not None:
            with _LOCK:
                _CACHE.put(key, jitted)
    if not kwargs and all(type(a) is np.ndarray for a in args):
        core.EAGER_ARRAY_CALLS[public, len(args)] = jitted      # the op's next calls go direct
    return jitted(*[args[p] for p in positions])


core.set_eager_runner(run_eagerly)
