"""The tensor graph: immutable nodes and a graph of named inputs and ordered outputs."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .dtypes import DType
from .ops import Op


CONST_ALIGN = 64         # bytes: a constant's data starts on a cache line


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `array` whose data starts on a CONST_ALIGN-byte boundary.
    Kernels stream constants (prepacked weight panels) with full-vector loads: numpy's
    buffers start 16 bytes into a line, so each 64-byte load spans two lines. Measured
    (Intel Ice Lake-SP, 1 thread, Winograd 3x3 convs at batch 1, ms, numpy's / aligned
    panels): 64->64 at 56x56 1.27 / 1.07, 256->256 at 14x14 1.90 / 1.58."""
    raw = np.empty(array.nbytes + CONST_ALIGN, np.uint8)
    skip = -raw.ctypes.data % CONST_ALIGN
    out = raw[skip:skip + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(out, array, casting="no")
    return out


def aligned_zeros(shape, dtype) -> np.ndarray:
    """np.zeros(shape, dtype) starting on a CONST_ALIGN-byte boundary: a packer fills it and
    ConstArray.derived keeps it without a copy."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(nbytes + CONST_ALIGN, np.uint8)
    skip = -raw.ctypes.data % CONST_ALIGN
    return raw[skip:skip + nbytes].view(dtype).reshape(shape)


def is_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % CONST_ALIGN == 0


class ConstArray:
    """An array constant: a private read-only copy plus a content digest for hashing and printing.
    Its data starts on a cache line (`aligned_copy`)."""

    __slots__ = ("array", "digest")

    def __init__(self, array: np.ndarray):
        self._hold(aligned_copy(np.asarray(array)))

    def _hold(self, arr: np.ndarray) -> None:
        arr.flags.writeable = False
        self.array = arr
        h = hashlib.sha1(arr)                 # (the buffer itself: no bytes copy)
        h.update(f"{arr.dtype}{arr.shape}".encode())
        self.digest = h.hexdigest()[:16]

    @classmethod
    def owned(cls, array: np.ndarray) -> "ConstArray":
        """A constant of an array that nothing else holds or writes (one the caller computed
        for the compiler alone): held as a read-only view, not copied when C-contiguous and
        aligned (a BERT-base's folded transposed weights, 340 MB, took ~0.6 s to copy once more)."""
        const = cls.__new__(cls)
        const._hold(array.view() if array.flags.c_contiguous and is_aligned(array)
                    else aligned_copy(array))
        return const

    @classmethod
    def derived(cls, array: np.ndarray, source: "ConstArray", how: str) -> "ConstArray":
        """A constant the compiler computed from `source` (GEMM or conv weights packed into
        panels): `array`, contiguous and owned by the caller, is kept as is (made read-only,
        not copied), and its digest comes from source's and `how` instead of hashing the
        data again (a BERT-base's weights took ~0.5 s to copy and hash once more). Copied
        only where its data does not start on a cache line (`aligned_copy`)."""
        assert array.flags.c_contiguous
        if not is_aligned(array):
            array = aligned_copy(array)
        array.flags.writeable = False
        const = cls.__new__(cls)
        const.array = array
        h = hashlib.sha1(f"{source.digest} {how} {array.dtype}{array.shape}".encode())
        const.digest = h.hexdigest()[:16]
        return const

    def __eq__(self, other):
        return isinstance(other, ConstArray) and other.digest == self.digest

    def __hash__(self):
        return hash(self.digest)

    def __repr__(self):
        return f"array<{self.digest}>"


@dataclass(frozen=True, eq=False)
class Node:
    """One value of the graph. `arg` holds the op's static parameters (axes, shape, value...).

    Nodes compare by identity; `key()` gives the structural identity used by CSE.
    """
    op: Op
    dtype: DType
    shape: tuple
    src: tuple = ()
    arg: object = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def key(self) -> tuple:
        return (self.op, self.dtype, self.shape, tuple(id(s) for s in self.src), self.arg)

    def replace(self, **changes) -> "Node":
        fields = dict(op=self.op, dtype=self.dtype, shape=self.shape, src=self.src, arg=self.arg)
        fields.update(changes)
        return Node(**fields)


def toposort(outputs) -> list:
    """All nodes reachable from `outputs`, sources before users, in a deterministic order."""
    order, seen = [], set()
    stack = [(n, False) for n in reversed(outputs)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((s, False) for s in reversed(node.src) if id(s) not in seen)
    return order


@dataclass
class Graph:
    """Named inputs (INPUT nodes, in call order) and the ordered outputs."""
    name: str
    inputs: list
    outputs: list

    def nodes(self) -> list:
        """Every node the outputs depend on, plus all inputs, sources first."""
        order = toposort(self.outputs)
        seen = {id(n) for n in order}
        return [i for i in self.inputs if id(i) not in seen] + order

    def text(self) -> str:
        from .printer import print_graph
        return print_graph(self)

    def digest(self) -> str:
        """Structural hash: the sha256 of the text form (names of inputs included)."""
        return hashlib.sha256(self.text().encode()).hexdigest()
