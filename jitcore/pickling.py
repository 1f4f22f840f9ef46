"""Pickling jitted functions: the Python function and the options travel, compiled code does not.

The receiving process traces and compiles again on the first call (or loads the machine code
from its disk cache), so multiprocessing, Dask and Ray workers can run jitted functions.

How the Python function travels:
  - a function importable by module and name (a module-level `@jc.jit def f`, whose module
    attribute is the jitted function itself) goes by reference, as pickle sends any function;
  - anything else (lambdas, closures, functions of `__main__`) goes by value through
    cloudpickle when it is installed: pickled into bytes here, so plain `pickle` (what
    multiprocessing uses) can carry it too, and Dask workers, whose `__main__` is not the
    script's, can rebuild it;
  - without cloudpickle, a `__main__` function goes by reference (multiprocessing's spawned
    workers re-import the main script), and a lambda or closure fails as pickle fails for it.
Modules that cloudpickle was told to pickle by value (`cloudpickle.register_pickle_by_value`)
go by value.
"""
from __future__ import annotations

import importlib
import pickle
import sys


def reduce(jitted) -> tuple:
    """`JitFunction.__reduce__`: rebuild with the same class, function and options."""
    fn, cls, options = jitted._fn, type(jitted), jitted._options
    where = _importable(fn)
    if where is not None:
        return _from_module, (cls, *where, options)
    cloudpickle = _cloudpickle()
    if cloudpickle is not None:
        return _from_bytes, (cls, cloudpickle.dumps(fn), options)
    if fn.__module__ == "__main__" and _lookup(sys.modules["__main__"], fn.__qualname__,
                                               fn) is not None:
        return _from_module, (cls, "__main__", fn.__qualname__, options)
    return _from_function, (cls, fn, options)


def _importable(fn):
    """(module, qualified name) when fn can be found by import, not in __main__ and not in a
    module registered with cloudpickle for pickling by value."""
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module_name in (None, "__main__") or "<" in qualname or _by_value(module_name):
        return None
    module = sys.modules.get(module_name)
    if module is None or _lookup(module, qualname, fn) is None:
        return None
    return module_name, qualname


def _lookup(module, qualname: str, fn):
    """The object at module.qualname when it is fn or a jitted function of fn."""
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if obj is fn or getattr(obj, "_fn", None) is fn else None


def _cloudpickle():
    try:
        import cloudpickle
    except ImportError:
        return None
    return cloudpickle


def _by_value(module_name: str) -> bool:
    cloudpickle = sys.modules.get("cloudpickle")
    registered = getattr(cloudpickle, "list_registry_pickle_by_value", lambda: ())()
    return any(module_name == m or module_name.startswith(m + ".") for m in registered)


def _from_module(cls, module_name: str, qualname: str, options: dict):
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return cls(getattr(obj, "_fn", obj), **options)


def _from_bytes(cls, payload: bytes, options: dict):
    return cls(pickle.loads(payload), **options)


def _from_function(cls, fn, options: dict):
    return cls(fn, **options)
