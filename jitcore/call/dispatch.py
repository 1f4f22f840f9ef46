"""Which known plan fits a call's arguments, reading as little of them as possible.

A jitted function keeps one plan per signature, keyed by `plan_key`: (shape, strides,
dtype) of each argument. Building that whole key costs about as much as a small native call
(`shape` and `strides` are new tuples at every read, hashed every time), so when signatures
alternate the call path asks a `Dispatch` instead: it reads only the attributes that tell
the known signatures apart (often one argument's dtype, or its shape, or its strides) and
maps their values to the plan. It only proposes a candidate: the plan's native entry still checks
every argument, and arguments that no known signature fits end in the slow path, which
builds a new Dispatch when it adds a plan.

`lookup_paths` turns a Dispatch into the call paths a jitted function uses while its
signatures alternate; the same signature twice running hands back to that plan's own fast
paths, which do no lookup at all.
"""
from __future__ import annotations

import operator
import weakref

from .plan import MISMATCH, SCALAR_TYPES, scalar_marker

_LAYOUT = operator.attrgetter("shape", "strides", "dtype")
_POSITION = {"shape": 0, "strides": 1, "dtype": 2}     # in _LAYOUT's triple
# attributes in the order they are tried: reading a dtype makes no new object
_ATTRS = ("dtype", "shape", "strides")
_ARITY = ("arity", None)                  # the feature "number of arguments"


def plan_key(args: tuple) -> tuple:
    """The key of a signature's plan: (shape, strides in bytes, dtype) of each array, and
    a marker with the type of each Python scalar (their values are run-time inputs)."""
    return tuple(scalar_marker(type(a)) if type(a) in SCALAR_TYPES else _LAYOUT(a)
                 for a in args)


def _reader(feature: tuple, guarded: bool):
    """A function of the call's argument tuple that reads one feature."""
    attr, i = feature
    if attr == "arity":
        return len
    if guarded:                           # plans of several arities: args[i] may not exist
        def read(args):
            return getattr(args[i], attr) if i < len(args) else None
        return read
    if attr == "dtype":
        return lambda args: args[i].dtype
    if attr == "shape":
        return lambda args: args[i].shape
    return lambda args: args[i].strides


def _project(key: tuple, feature: tuple):
    attr, i = feature
    if attr == "arity":
        return len(key)
    return key[i][_POSITION[attr]] if i < len(key) else None


def _features(keys: list) -> list:
    """Greedily, the fewest features (cheapest first on ties) whose values differ between
    every two keys. Two different keys differ in some feature, so each round separates at
    least one more pair."""
    arities = {len(k) for k in keys}
    chosen = [_ARITY] if len(arities) > 1 else []
    candidates = [(attr, i) for attr in _ATTRS for i in range(max(arities, default=0))]

    def distinct(features):
        return len({tuple(_project(k, f) for f in features) for k in keys})
    while distinct(chosen) < len(keys):
        # max keeps the first of equal candidates: the cheapest, by _ATTRS order
        chosen.append(max(candidates, key=lambda c: distinct(chosen + [c])))
    return chosen


class Dispatch:
    """`table.get(read(args))`: the plan for arguments of a known signature (a candidate that
    its native entry confirms); raises AttributeError or TypeError for arguments that are
    not arrays. Built from a snapshot of {plan key: plan}, never changed afterwards."""

    __slots__ = ("read", "table", "features")

    def __init__(self, plans: dict):
        keys = list(plans)
        self.features = _features(keys)
        guarded = _ARITY in self.features
        readers = [_reader(f, guarded) for f in self.features]
        if len(readers) == 1:
            read = readers[0]
            self.table = {_project(k, self.features[0]): plans[k] for k in keys}
        else:
            def read(args):
                return tuple([r(args) for r in readers])
            self.table = {tuple(_project(k, f) for f in self.features): plans[k]
                          for k in keys}
        self.read = read


def lookup_paths(dispatch: Dispatch, owner) -> tuple:
    """(fast(args), fast_out(args, out)): each call finds its plan in `dispatch` and calls
    the plan's fast path. When one plan serves two calls running, `owner` (the jitted
    function, held weakly) gets that plan's fast paths back as its own."""
    owner_ref = weakref.ref(owner)
    read, find = dispatch.read, dispatch.table.get     # closure cells: no attribute lookups
    last = None

    def fast(args):
        nonlocal last
        try:
            plan = find(read(args))
        except (AttributeError, TypeError):   # a list or Python scalar: normalize first
            return MISMATCH
        if plan is None:
            return MISMATCH
        result = plan.fast(args)
        if result is not MISMATCH:
            if plan is last:
                _settle(owner_ref, plan)
            last = plan
        return result

    def fast_out(args, out):
        nonlocal last
        try:
            plan = find(read(args))
        except (AttributeError, TypeError):
            return MISMATCH
        if plan is None:
            return MISMATCH
        result = plan.fast_out(args, out)
        if result is not MISMATCH:
            if plan is last:
                _settle(owner_ref, plan)
            last = plan
        return result
    return fast, fast_out


def foreign_path(dispatch: Dispatch, foreign_type, view):
    """fast(args) for steady calls with foreign arrays (CPU torch tensors, JAX arrays):
    each argument of exactly `foreign_type` is viewed in place by `view` (for torch
    `Tensor.numpy`, one C call) and the views go to their plan's fast path. An array that
    cannot be viewed (GPU, requires grad, bfloat16) is a MISMATCH: the slow path explains
    it. (Unlike lookup_paths, a plan never settles as the owner's fast path here: that one
    takes ndarrays only.)"""
    read, find = dispatch.read, dispatch.table.get

    def foreign_fast(args):
        try:
            views = tuple([view(a) if type(a) is foreign_type else a for a in args])
            plan = find(read(views))
        except Exception:                      # noqa: BLE001 -- the slow path explains
            return MISMATCH
        return MISMATCH if plan is None else plan.fast(views)
    return foreign_fast


def _settle(owner_ref, plan) -> None:
    """One signature twice running: its plan's fast paths become the owner's first try."""
    owner = owner_ref()
    if owner is not None:
        owner._fast, owner._fast_out = plan.fast, plan.fast_out
