"""Streaming (non-temporal) stores of large outputs (jitcore/llvm/streaming.py): results equal
numpy's whatever the alignment of the output (peeled runs, misaligned or differently aligned
outputs that fall back to normal stores; transposing tiles keep normal stores), for
every dtype, sizes around the threshold and odd ones, 1 and 2 threads; the IR has
`!nontemporal` stores (and a store fence) exactly when the output reaches the threshold.

Most tests lower the threshold (JITCORE_STREAM_STORES through config.override) so that small,
fast arrays take the streaming path."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from jitcore import config
from jitcore.llvm.target import stream_threshold

from helpers import (ALL_DTYPES, FLOAT_DTYPES, NARROW_WIDTHS, NUMERIC_DTYPES, assert_close,
                     dtype_id)

LOW = 256                      # bytes: the threshold most tests compile with
THREADS = [1, 2]
X86 = jc.target_info()["machine"] in ("x86_64", "AMD64")


def jit_at(fn, threshold: int, threads: int = 1, width=None):
    """`fn` jitted and compiled (at its first call) with streaming from `threshold` bytes."""
    f = jc.jit(fn, num_threads=threads, vector_width=width)

    def call(*args, **kwargs):
        with config.override(stream_stores=threshold):
            return f(*args, **kwargs)
    call.llvm_ir = lambda *a: _under(threshold, f.llvm_ir, *a)
    call.asm = lambda *a: _under(threshold, f.asm, *a)
    return call


def _under(threshold, method, *args):
    with config.override(stream_stores=threshold):
        return method(*args)


def streams(ir_text: str) -> bool:
    return "!nontemporal" in ir_text


def inputs(dtype, n: int, seed: int = 0, count: int = 3, pad: int = 0):
    """`count` arrays of n+pad elements of `dtype` (small values: integer products fit)."""
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return [rng.random(n + pad) < 0.5 for _ in range(count)]
    if np.issubdtype(dtype, np.integer):
        return [rng.integers(0, 11, n + pad).astype(dtype) for _ in range(count)]
    return [rng.standard_normal(n + pad).astype(dtype) for _ in range(count)]


def fma(a, b, c):
    return a * b + c


def check_fma(got, dtype, a, b, c, msg=""):
    """got == a * b + c: exact for integers (uint8 wraps as numpy does); for floats against
    float64, within a few roundings of the terms (the sum cancels)."""
    if np.issubdtype(dtype, np.floating):
        a64 = a.astype(np.float64)
        assert_close(got, a64 * b + c, dtype, scale=np.abs(a64 * b) + np.abs(c), msg=msg)
    else:
        assert_close(got, a * b + c, dtype, msg=msg)


# ---- elementwise: peel + aligned streaming + tail ---------------------------------------------
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_sizes_around_the_threshold(dtype, threads):
    """Outputs just under, at and over the threshold, and odd sizes: numpy's values, and
    streaming stores in the IR exactly from the threshold on."""
    item = np.dtype(dtype).itemsize
    at = 4096 // item
    for n in (at - 1, at, at + 1, 1, 7, 1023, 4097, 10007):
        f = jit_at(fma, 4096, threads)
        a, b, c = inputs(dtype, n, seed=n)
        got = f(a, b, c)
        check_fma(got, dtype, a, b, c, msg=f"n={n}")
        assert streams(f.llvm_ir(a, b, c)) == (n * item >= 4096), n


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_unaligned_views(dtype, threads):
    """The output and the inputs start at every element offset within a vector (and past
    it): the peel differs per offset, the inputs' misalignment is independent of it."""
    n = 1000 + 17
    f = jit_at(fma, LOW, threads)
    a, b, c = inputs(dtype, n, pad=40)
    for out_off in range(0, 33, 3):
        in_off = (out_off * 7) % 40
        buf = np.full(n + 40, 99, dtype)
        out = buf[out_off:out_off + n]
        x, y, z = a[in_off:in_off + n], b[:n], c[40 - in_off:40 - in_off + n]
        f(x, y, z, out=out)
        check_fma(out, dtype, x, y, z, msg=f"offset {out_off}")
        # nothing outside the view was written
        assert (buf[:out_off] == 99).all() and (buf[out_off + n:] == 99).all()


@pytest.mark.parametrize("width", NARROW_WIDTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8], ids=dtype_id)
def test_narrower_vectors(dtype, width):
    """256- and 128-bit vectors: smaller alignments, other peels."""
    n = 999
    f = jit_at(fma, LOW, 1, width)
    a, b, c = inputs(dtype, n, pad=16)
    for off in (0, 1, 3, 7, 9):
        buf = np.full(n + 16, 5, dtype)
        f(a[off:off + n], b[:n], c[:n], out=buf[off:off + n])
        check_fma(buf[off:off + n], dtype, a[off:off + n], b[:n], c[:n], msg=f"offset {off}")
        assert (buf[:off] == 5).all() and (buf[off + n:] == 5).all()
    assert streams(f.llvm_ir(a[:n], b[:n], c[:n]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=dtype_id)
def test_parallel_chunks_each_peel(dtype):
    """2 threads over an output of several MB: every chunk starts at its own alignment and
    peels on its own (chunk boundaries are not vector-aligned for odd offsets)."""
    n = (1 << 18) + 13
    f = jit_at(fma, LOW, 2)
    a, b, c = inputs(dtype, n, pad=8)
    for off in (0, 1, 5):
        buf = np.full(n + 8, 7, dtype)
        f(a[off:off + n], b[:n], c[8 - off:8 - off + n], out=buf[off:off + n])
        check_fma(buf[off:off + n], dtype, a[off:off + n], b[:n], c[8 - off:8 - off + n],
                  msg=f"offset {off}")
        assert (buf[:off] == 7).all() and (buf[off + n:] == 7).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=dtype_id)
def test_output_not_aligned_to_its_element(dtype):
    """An output at an odd byte address (from a byte buffer) cannot be vector-aligned: the
    plain loop writes it, with the same results."""
    n = 777
    f = jit_at(fma, LOW)
    a, b, c = inputs(dtype, n)
    item = np.dtype(dtype).itemsize
    raw = bytearray(n * item + 8)
    out = np.frombuffer(raw, dtype, n, offset=1)
    assert not out.flags.aligned
    f(a, b, c, out=out)
    check_fma(out, dtype, a, b, c)
    assert raw[0] == 0 and all(v == 0 for v in raw[1 + n * item:])


@pytest.mark.parametrize("threads", THREADS)
def test_bool_outputs(threads):
    """One-byte outputs (a comparison) stream too: 16-byte vectors, peeled to 16 bytes."""
    n = 5003
    f = jit_at(lambda a, b: a > b, LOW, threads)
    a, b = inputs(np.float32, n, count=2, pad=9)
    for off in (0, 1, 5, 9):
        out = np.zeros(n + 9, np.bool_)
        f(a[off:off + n], b[:n], out=out[off:off + n])
        assert_close(out[off:off + n], a[off:off + n] > b[:n], np.bool_)
        assert not out[:off].any() and not out[off + n:].any()
    assert streams(f.llvm_ir(a[:n], b[:n]))


@pytest.mark.parametrize("threads", THREADS)
def test_two_outputs_aligned_alike_or_not(threads):
    """A kernel with two streamed outputs peels once: when their alignments differ it falls
    back to normal stores; either way both are numpy's."""
    n = 3001
    f = jit_at(lambda a, b: (a + b, a * b), LOW, threads)
    a, b = inputs(np.float64, n, count=2)
    for off1, off2 in ((0, 0), (3, 3), (0, 1), (5, 2)):
        o1, o2 = np.empty(n + 8), np.empty(n + 8)
        f(a, b, out=(o1[off1:off1 + n], o2[off2:off2 + n]))
        assert_close(o1[off1:off1 + n], a + b, np.float64)
        assert_close(o2[off2:off2 + n], a * b, np.float64)
    assert streams(f.llvm_ir(a, b))


# ---- 2-D: broadcasts (a peel per row) and transposes (register tiles) ------------------------
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_broadcast_rows(dtype, threads):
    """(R,1) + (1,C) * (R,C) into row views whose starts have every alignment (the output's
    row stride is not a multiple of the vector)."""
    r, cols = 37, 1001
    f = jit_at(lambda a, b, c: a + b * c, LOW, threads)
    rng = np.random.default_rng(1)
    a = rng.integers(0, 9, (r, 1)).astype(dtype)
    b = rng.integers(0, 9, (1, cols)).astype(dtype)
    c = rng.integers(0, 9, (r, cols)).astype(dtype)
    want = a + b * c
    for col_off in (0, 1, 3):
        big = np.zeros((r, cols + 5), dtype)
        out = big[:, col_off:col_off + cols]
        f(a, b, c, out=out)
        assert_close(out, want, dtype, msg=f"offset {col_off}")
        assert (big[:, :col_off] == 0).all() and (big[:, col_off + cols:] == 0).all()
    assert streams(f.llvm_ir(a, b, c))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [np.int32, np.uint8], ids=dtype_id)
def test_transposed_adds(dtype, threads):
    """a + b.T through register tiles at a low streaming threshold: blocks of tiles (both
    ways), leftover tiles, rows and columns, into output views of every row alignment (the
    blocks whose rows are aligned stream, the others fall back to normal stores)."""
    f = jit_at(lambda a, b: a + b.T, LOW, threads)
    for rows, cols in ((64, 64), (67, 45), (130, 97), (16 * 9, 48), (300, 270), (256, 128)):
        a, = inputs(dtype, rows * cols, seed=rows, count=1)
        b, = inputs(dtype, rows * cols, seed=cols, count=1)
        a, b = a.reshape(rows, cols), b.reshape(cols, rows)
        want = a.astype(np.float64) + b.T if np.issubdtype(dtype, np.floating) else a + b.T
        assert_close(f(a, b), want, dtype, msg=f"{rows}x{cols}")
        for col_off in (0, 1):
            big = np.zeros((rows, cols + 3), dtype)
            out = big[:, col_off:col_off + cols]
            f(a, b, out=out)
            assert_close(out, want, dtype, msg=f"{rows}x{cols} view at {col_off}")
            assert (big[:, :col_off] == 0).all() and (big[:, col_off + cols:] == 0).all()
    assert streams(f.llvm_ir(a, b))


LEVELS = ["native", "x86-64-v3", "x86-64-v2"]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.bool_],
                         ids=dtype_id)
def test_transposed_blocks_of_long_runs(dtype, level):
    """A streamed tiled output takes blocks of long runs (tiles.LONG_RUNS: 256 x 128-256
    elements for 4-8 byte elements at every width): extents around a block both ways, a
    last shorter block of whole tiles each way, thread splits that start inside a block, and
    output rows that are vector-aligned (streaming, from their first column or a later one)
    or not, each bitwise equal to numpy and nothing written outside the output."""
    if not X86:
        pytest.skip("x86 levels")
    try:
        jc.target_info(target=level)
    except jc.TargetError:
        pytest.skip(f"the host cannot run {level}")
    op = (lambda x, y: x | y) if dtype == np.bool_ else (lambda x, y: x + y)
    for threads in THREADS:
        with config.override(stream_stores=LOW):
            f = jc.jit(lambda a, b: op(a, b.T), num_threads=threads, target=level)
            for rows, cols in ((256, 256), (257, 255), (513, 272), (255, 529), (300, 64)):
                a, = inputs(dtype, rows * cols, seed=rows, count=1)
                b, = inputs(dtype, rows * cols, seed=cols, count=1)
                a, b = a.reshape(rows, cols), b.reshape(cols, rows)
                want = op(a, b.T)
                np.testing.assert_array_equal(f(a, b), want, err_msg=f"{rows}x{cols}")
                # output rows aligned alike (from their first element, or from a later
                # one: the columns before it run scalar), or not
                for extra, shift in ((0, 0), (0, 3), (1, 0), (1, 3)):
                    big = np.zeros((rows, -(-cols // 64) * 64 + 64 + extra), dtype)
                    skew = (-big.ctypes.data % 64) // big.itemsize + shift
                    out = big[:, skew:skew + cols]
                    f(a, b, out=out)
                    np.testing.assert_array_equal(out, want,
                                                  err_msg=f"{rows}x{cols}+{extra}@{shift}")
                    assert not big[:, :skew].any() and not big[:, skew + cols:].any()
            assert streams(f.llvm_ir(a, b))


# ---- when the stores stream -------------------------------------------------------------------
def test_large_outputs_stream_and_small_ones_do_not():
    """At the target's own threshold: an output of that size streams, one element less does
    not; JITCORE_STREAM_STORES=0 turns streaming off."""
    threshold = jc.target_info()["stream_store_bytes"]
    assert threshold > 0
    n = threshold // 4
    big = jc.spec((n,), jc.float32)
    small = jc.spec((n - 1,), jc.float32)
    f = jc.jit(fma)
    ir_big = f.llvm_ir(big, big, big)
    assert streams(ir_big) and not streams(f.llvm_ir(small, small, small))
    if X86:
        assert "llvm.x86.sse.sfence" in ir_big
        assert "vmovnt" in f.asm(big, big, big) or "movnt" in f.asm(big, big, big)
    assert not streams(jit_at(fma, 0).llvm_ir(big, big, big))


def test_reductions_and_scans_never_stream():
    """Kernels that read what they stored (running sums) or write one value per row keep
    normal stores."""
    x = jc.spec((64, 4096), jc.float32)
    for fn in (lambda x: x.sum(axis=1), lambda x: x.sum(axis=0), lambda x: jc.cumsum(x, axis=1)):
        assert not streams(jit_at(fn, LOW).llvm_ir(x))


def test_threshold_from_cache_sizes():
    """4 L2 caches, at most the last level; the settings' value wins and is validated."""
    assert stream_threshold({1: 48 << 10, 2: 2 << 20, 3: 260 << 20}) == 8 << 20
    assert stream_threshold({2: 1 << 20, 3: 32 << 20}) == 4 << 20
    assert stream_threshold({2: 4 << 20, 3: 8 << 20}) == 8 << 20
    with config.override(stream_stores=12345):
        assert jc.target_info()["stream_store_bytes"] == 12345


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_fresh_outputs_stream_correctly(dtype):
    """Natural use (a fresh output from jitcore's allocator) at every dtype, 2 threads."""
    n = 50021
    f = jit_at(lambda a, b: a == b if dtype == np.bool_ else a + b, LOW, 2)
    a, b = inputs(dtype, n, count=2)
    want = (a == b) if dtype == np.bool_ else (a.astype(np.float64) + b
                                               if np.issubdtype(dtype, np.floating) else a + b)
    assert_close(f(a, b), want, np.bool_ if dtype == np.bool_ else dtype)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_dynamic_kernels_decide_streaming_from_the_calls_own_size(dtype, threads):
    """With run-time extents (dynamic=True) the compile sees placeholders, so the kernel
    compares the call's own output size with the threshold: one compile serves batches
    under it (plain stores) and over it (streamed), each equal to numpy."""
    f = jc.jit(fma, num_threads=threads, dynamic=True)
    before = jc.cache_info()["compiles"]
    cols = 48
    for rows in (2, 3, 7, 16, 21, 40, 97):      # 4096 bytes at 16-21 rows of f32/i32
        a, b, c = (x.reshape(rows, cols) for x in inputs(dtype, rows * cols, seed=rows))
        with config.override(stream_stores=4096):
            got = f(a, b, c)
            if rows == 97:
                assert streams(f.llvm_ir(a, b, c))
        assert got.dtype == np.dtype(dtype) and got.shape == (rows, cols)
        if dtype == np.int32:
            np.testing.assert_array_equal(got, a * b + c)
        else:
            a64 = a.astype(np.float64)
            assert_close(got, a64 * b + c, dtype, scale=np.abs(a64 * b) + np.abs(c),
                         msg=f"{rows} rows")
    assert jc.cache_info()["compiles"] - before == 1
