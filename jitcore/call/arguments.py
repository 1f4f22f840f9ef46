"""What a jitted function's parameters are: their names, a name for the function itself
(partials and callable objects have no __name__), and which arguments are static.

Pure introspection of the Python callable (inspect.signature, once per jc.jit); the call
path (`jitcore.api`) uses it to split a call into static values and run-time inputs.
"""
from __future__ import annotations

import functools
import inspect


def positional_names(fn) -> list:
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def takes_varargs(fn) -> bool:
    try:
        return any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True                        # unknown: let the function itself complain


def name_of(fn) -> str:
    """A name for graphs and messages: partials and callable objects have no __name__."""
    name = getattr(fn, "__name__", None)
    if isinstance(name, str):
        return name
    if isinstance(fn, functools.partial):
        return name_of(fn.func)
    return type(fn).__name__


def input_names(params: list, count: int, skip=()) -> list:
    """Names of the first `count` arguments a call passes (parameters bound as constants are
    not passed); `arg<i>` past the named ones."""
    names = [n for n in params if n not in skip][:count]
    names += [f"arg{i}" for i in range(len(names), count)]
    return names


def static_spec(fn, call_names: list, argnums, argnames) -> tuple:
    """jit(static_argnums=, static_argnames=) checked against fn's parameters: the static
    call positions and the static keyword names (each given either way counts as both)."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums or ())
    names = (argnames,) if isinstance(argnames, str) else tuple(argnames or ())
    for n in nums:
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"jit(static_argnums=) takes ints, got {n!r}")
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"jit(static_argnames=) takes parameter names, got {n!r}")
    try:
        params = inspect.signature(fn).parameters
        known = {n for n, p in params.items() if p.kind != p.VAR_POSITIONAL}
        open_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        known, open_kw = set(), True
    for n in names:
        if n not in known and not open_kw:
            raise ValueError(f"jit(static_argnames=): {n!r} is not a parameter of "
                             f"{name_of(fn)!r} (parameters: {sorted(known)})")
    positions = {n % len(call_names) if n < 0 and call_names else n for n in nums}
    positions |= {call_names.index(n) for n in names if n in call_names}
    keywords = set(names) | {call_names[n] for n in positions if n < len(call_names)}
    return frozenset(positions), frozenset(keywords)


class Identity:
    """A bound method's `self` in a cache key: the object itself, compared by identity
    (a class may define __eq__ without __hash__)."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, Identity) and other.obj is self.obj
