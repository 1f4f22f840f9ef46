"""Row reads from cache-line-aligned loads (512-bit vectors): a zmm load of a row that does
not start on a 64-byte line spans two lines on every vector. numpy's large arrays start 16
bytes into a line (glibc's mmap chunks), and such split loads made horizontal sums read from
L2 1.4-1.8x slower than the same rows on a line (Intel Xeon Ice Lake-SP @2.8GHz, 1 thread,
float32 256x1024 and 16x16384), where numba's ymm loop (half its loads split) was not slowed.

Instead each vector of the row is rebuilt from the two lines it touches, both loaded aligned:
the line the previous vector ended in (carried from trip to trip) and the line holding the
vector's last byte, joined by a two-source lane permute (vpermi2var, one shuffle uop). The
lanes hold the same elements as the plain loads, in the same order, so results are bitwise
those of the plain loop. Every line loaded holds a byte of the row: no page is touched that
the plain loop would not touch.

A row whose loads all start on a line (nothing to gain) or one that does not start on an
element boundary (lanes cannot be rebuilt from whole elements) takes the plain loop: both
versions are emitted, and a branch per row picks one. Who uses it, and where it did not pay
(data read from memory, max rows, softmax and layer_norm): reduce.HorizontalEmitter."""
from __future__ import annotations

from llvmlite import ir

from jitcore.passes.kernel import Gather, Load, walk

from . import irutil as u

LINE = 64           # bytes of a cache line, and of a 512-bit vector
MIN_VECTORS = 8     # a row of fewer vectors than this (a known length) keeps the plain loop
# the permute per lane type: AVX512F has 32- and 64-bit lanes (bytes and words need VBMI/BW)
PERMUTES = {(32, True): "ps", (64, True): "pd", (32, False): "d", (64, False): "q"}


class AlignedStream:
    """One contiguous load of the vector loop, read from aligned lines: the last line loaded
    (loop-carried through an alloca, which mem2reg promotes to a phi) and each lane's index
    into [that line, the next one]. Created where the loop starts (the row's first element
    is at `start`); after `prime()`, `load(ptr)` gives the vectors at ptr = start,
    start + 64, ... in that order."""

    def __init__(self, ke, node: Load, start_ptr):
        b = self.b = ke.b
        elem = u.memory_type(node.dtype)
        size = u.memory_type_bytes(elem)
        lanes = LINE // size
        self.vty = ir.VectorType(elem, lanes)
        self.start = b.ptrtoint(start_ptr, u.I64)
        # the first lane's element in [previous line, next line]: its place in its line, or
        # a whole line on when the row starts on one (only the next line is then read)
        at = b.lshr(b.and_(self.start, u.I64(LINE - 1)), u.I64(size.bit_length() - 1))
        first = b.add(b.and_(b.sub(at, u.I64(1)), u.I64(lanes - 1)), u.I64(1))
        ity = u.I32 if size == 4 else u.I64
        iota = ir.Constant(ir.VectorType(ity, lanes), list(range(lanes)))
        self.index = b.add(iota, u.splat(b, b.trunc(first, ity) if size == 4 else first, lanes))
        # the line holding a vector's last byte: the vector's address plus this, as vectors
        # of the row start a line apart
        self.delta = b.sub(b.and_(b.add(self.start, u.I64(LINE - 1)), u.I64(-LINE)),
                           self.start)
        self.prev = u.alloca_once(b, self.vty, name="line")
        name = f"x86.avx512.vpermi2var.{PERMUTES[(size * 8, node.dtype.is_float)]}.512"
        fnty = ir.FunctionType(self.vty, [self.vty, self.index.type, self.vty])
        self.permute = u.declare_intrinsic(b.module, name, [], fnty)

    def prime(self):
        """Load the line holding the row's first element (the row must have one)."""
        b = self.b
        line = b.inttoptr(b.and_(self.start, u.I64(-LINE)), self.vty.as_pointer())
        b.store(b.load(line, align=LINE), self.prev)

    def split(self):
        """i1: the row's loads span two lines each."""
        return self.b.icmp_unsigned("!=", self.b.and_(self.start, u.I64(LINE - 1)), u.I64(0))

    def whole_elements(self):
        """i1: the row starts on an element boundary."""
        size = u.memory_type_bytes(self.vty.element)
        return self.b.icmp_unsigned("==", self.b.and_(self.start, u.I64(size - 1)), u.I64(0))

    def load(self, ptr):
        """The vector at `ptr` (the next one of the row): the line holding its last byte
        joined with the line before."""
        b = self.b
        line = b.gep(b.bitcast(ptr, u.I8P), [self.delta])
        nxt = b.load(b.bitcast(line, self.vty.as_pointer()), align=LINE)
        val = b.call(self.permute, [b.load(self.prev), self.index, nxt])
        b.store(nxt, self.prev)
        return val


def stream_loads(kernel, values) -> list:
    """The loads in `values` that read 512-bit vectors of 32- or 64-bit elements with unit
    stride along the kernel's vector loop (each once)."""
    var, lanes, out = kernel.vector_var, kernel.lanes, {}
    for n in walk(values):
        if isinstance(n, Load) and not isinstance(n, Gather) and n.offset.coeff(var) == 1 \
                and n.dtype.name not in ("bool", "bfloat16") and n.dtype.bits * lanes == LINE * 8:
            out.setdefault(id(n), n)
    return list(out.values())


def aligned_or_plain(ke, lp, values, loop):
    """Emit loop() (ke's vector loop over `lp`, from 0) once with the contiguous loads of
    `values` read as AlignedStreams (ke.streams) and once plain; a row takes the first when
    one of its loads spans two lines and all start on an element. Only where it may pay:
    512-bit loads along `lp` (the vector loop), rows of a known length of at least
    MIN_VECTORS vectors."""
    lanes = ke.kernel.lanes
    nodes = stream_loads(ke.kernel, values) if lanes > 1 and lp.var == ke.vector_var else []
    length = ke.extent(lp.var.extent)
    known = u.constant_int(length)
    if not nodes or known is None or known < MIN_VECTORS * lanes:
        return loop()
    b, saved = ke.b, ke.env.get(lp.var)
    ke.env[lp.var] = u.I64(0)
    streams = {id(n): AlignedStream(ke, n, ke.element_ptr(n.buffer, n.offset, False))
               for n in nodes}
    if saved is None:
        del ke.env[lp.var]
    else:
        ke.env[lp.var] = saved
    split = whole = None
    for s in streams.values():
        split = s.split() if split is None else b.or_(split, s.split())
        whole = s.whole_elements() if whole is None else b.and_(whole, s.whole_elements())
    with b.if_else(b.and_(split, whole)) as (aligned, plain):
        with aligned:
            for s in streams.values():
                s.prime()
            ke.streams = streams
            loop()
            ke.streams = {}
        with plain:
            loop()
