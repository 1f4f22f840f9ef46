"""A kernel's structure as a hashable key, up to names: equal keys mean the backend emits the
same code (but for value names), so a kernel repeated across layers or graphs is generated and
compiled once.

The key is complete by construction: it walks every field of the kernel's dataclasses (loops,
stores, loads, expressions, reduction, GEMM, row-fusion parts) and of everything they reach.
Only names are left out (the kernel's, its buffers' and its loop variables'; they name IR values, nothing
else), and buffer slots are replaced by the order in which the walk first meets each buffer,
since the code reads its buffers from its own pointer array in that order (`slots` maps back).
Loop variables are numbered by first appearance too; like the backend, the walk treats two
variables of equal name and extent as one.
"""
from __future__ import annotations

import dataclasses
import enum

from .kernel import Acc, Buffer, Compute, Const, Kernel, Load, walk
from .symbolic import Var


def kernel_key(kernel) -> tuple:
    """(key, slots): a hashable description of `kernel`, and the graph slots of its buffers
    in the order the key numbers them."""
    walk = _Walk()
    top = walk.value(kernel)
    return (top, tuple(walk.dag)), tuple(walk.slots)


class _Walk:
    def __init__(self):
        self.buffers: dict = {}     # slot -> number
        self.slots: list = []
        self.vars: dict = {}        # Var (by value, as the backend's env) -> number
        self.nodes: dict = {}       # id(expression node) -> number in `self.dag`
        self.dag: list = []         # every expression node's description, sources first

    def expression(self, root) -> tuple:
        """A reference to an expression DAG's root. Nodes are described once each, sources
        first (iteratively: chains of thousands of ops), so shared subexpressions stay
        shared and deep ones cost no recursion."""
        for node in walk([root]):
            if id(node) in self.nodes:
                continue
            fields = tuple(self.value(getattr(node, f.name)) for f in dataclasses.fields(node)
                           if f.name != "src")
            src = tuple(self.nodes[id(n)] for n in getattr(node, "src", ()))
            self.nodes[id(node)] = len(self.dag)
            self.dag.append((type(node).__name__, fields, src))
        return ("node", self.nodes[id(root)])

    def value(self, x):
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return ("float", repr(x))          # -0.0 and nan stay distinct from 0.0
        if isinstance(x, enum.Enum):
            return (type(x).__name__, x.name)
        if isinstance(x, (tuple, list)):
            return (type(x).__name__,) + tuple(self.value(v) for v in x)
        if isinstance(x, dict):
            return ("dict",) + tuple(sorted((self.value(k), self.value(v)) for k, v in x.items()))
        if isinstance(x, (Load, Const, Compute, Acc)):
            return self.expression(x)
        if isinstance(x, Buffer):
            if x.slot not in self.buffers:
                self.buffers[x.slot] = len(self.slots)
                self.slots.append(x.slot)
            return ("buffer", self.buffers[x.slot], x.kind, self.value(x.dtype), x.shape,
                    x.strides)
        if isinstance(x, Var):
            number = self.vars.setdefault(x, len(self.vars))
            return ("var", number, x.extent)
        if dataclasses.is_dataclass(x):
            return (type(x).__name__,) + tuple(
                self.value(getattr(x, f.name)) for f in dataclasses.fields(x)
                if not (f.name == "name" and isinstance(x, Kernel)))
        if hasattr(x, "dtype") and hasattr(x, "item"):       # a numpy scalar constant
            return ("scalar", str(x.dtype), repr(x.item()))
        raise TypeError(f"kernel_key: no key for {type(x).__name__} {x!r}")
