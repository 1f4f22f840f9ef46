"""The output buffer cache (jitcore/cache/outputs.py): large fresh outputs reuse the blocks of
outputs the user has freed, never memory an array or a view still refers to; bounded by
JITCORE_OUTPUT_CACHE_MB; safe with threads and fork."""
from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, F64, I32, assert_close, f64, make, rng_for
from jitcore import config
from jitcore.cache import outputs as output_cache
from jitcore.cache.outputs import MIN_BYTES, OutputCache

LARGE = MIN_BYTES // 4               # float32 elements of the smallest cached output


def _relu_affine(a, b, c):
    return jc.maximum(a * b + c, 0) * 0.5


def _ref(a, b, c):
    return np.maximum(f64(a) * f64(b) + f64(c), 0) * 0.5


def _overlap(x, y) -> bool:
    return np.shares_memory(x, y)


# -- the cache itself (small blocks: any size works when asked directly) ----------------------
@pytest.mark.parametrize("dtype", [F32, F64, I32, np.dtype(np.uint8), np.dtype(np.bool_)],
                         ids=str)
@pytest.mark.parametrize("shape", [(1000,), (31, 17), (3, 0, 5), ()])
def test_blocks_come_back_only_when_no_array_refers_to_them(dtype, shape):
    cache = OutputCache(1 << 20)
    empty = cache.allocator(shape, dtype)
    a = empty()
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % output_cache.ALIGN == 0
    address = a.ctypes.data
    view = a.reshape(-1)[::2] if a.size else a[...]
    del a
    b = empty()                          # the view keeps the first block alive
    assert b.ctypes.data != address or not view.size
    assert not _overlap(b, view)
    del view
    gc.collect()
    c = empty()                          # now it is free: reused
    assert c.ctypes.data == address
    assert cache.stats["hits"] >= 1
    del b, c


def test_idle_blocks_stay_within_the_limit_oldest_out_first():
    block = OutputCache.block_bytes(100_000 * 4)
    cache = OutputCache(3 * block)
    empty = cache.allocator((100_000,), F32)
    arrays = [empty() for _ in range(5)]
    addresses = [a.ctypes.data for a in arrays]
    del arrays
    assert cache.idle_bytes == 3 * block and cache.stats["evicted"] == 2
    again = [empty() for _ in range(3)]  # the three kept: the last returned
    assert {a.ctypes.data for a in again} <= set(addresses)
    assert cache.idle_bytes == 0
    other = cache.allocator((7, 7), F64)()      # another size: a new block
    assert other.ctypes.data not in addresses
    del again, other
    too_big = OutputCache(1000).allocator((10_000,), F32)()
    assert too_big.size == 10_000        # served, but never kept
    del too_big
    cache.clear()
    assert cache.idle_bytes == 0


def test_many_threads_never_share_a_live_block():
    cache = OutputCache(64 << 20)
    shapes = [(4096,), (1000, 3), (50_000,)]
    errors = []

    def work(k):
        rng = np.random.default_rng(k)
        live = []
        try:
            for i in range(400):
                shape = shapes[rng.integers(len(shapes))]
                a = cache.allocator(shape, F32)()
                a.fill(k * 1000 + i)
                live.append((a, k * 1000 + i))
                if len(live) > 4:
                    live.pop(rng.integers(len(live)))
                for x, v in live:            # nobody else wrote into our live arrays
                    if not (x == v).all():
                        errors.append((k, i))
        except Exception as e:          # pragma: no cover - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert cache.idle_bytes <= cache.limit


# -- through jitted calls ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def large_args():
    if not output_cache.enabled_for(MIN_BYTES):
        pytest.skip("the output buffer cache is off (JITCORE_OUTPUT_CACHE_MB)")
    rng = rng_for("output-cache")
    return tuple(make((LARGE,), F32, rng=rng, positive=True) for _ in range(3))   # no cancelling


def test_large_fresh_outputs_reuse_freed_blocks_and_never_a_live_one(large_args):
    a, b, c = large_args
    f = jc.jit(_relu_affine)
    ref = _ref(a, b, c)
    first = f(a, b, c)
    assert isinstance(first.base, output_cache._Lease)
    assert_close(first, ref, F32)
    address = first.ctypes.data
    kept = first[::3]                          # a view keeps the block
    del first
    second = f(a, b, c)
    assert not _overlap(second, kept)
    freed = {address, second.ctypes.data}
    assert_close(kept, ref[::3], F32)
    del kept, second
    gc.collect()
    hits = jc.cache_info()["output_cache_hits"]
    third = f(a * 2, b, c)
    assert third.ctypes.data in freed              # pages mapped already
    assert_close(third, _ref(a * 2, b, c), F32)
    assert jc.cache_info()["output_cache_hits"] == hits + 1
    assert jc.cache_info()["output_cache_bytes"] <= jc.cache_info()["output_cache_limit"]
    out = np.empty_like(third)
    assert f(a, b, c, out=out) is out              # out= never touches the cache
    assert_close(out, ref, F32)


def test_large_outputs_of_other_signatures_and_several_outputs(large_args):
    """(One IEEE operation per output: numpy's float32 result is the exact reference.)"""
    a, b, _ = large_args
    f = jc.jit(lambda x, y: (x * y, x + y))
    p, s = f(a, b)
    assert not _overlap(p, s)
    assert np.array_equal(p, a * b) and np.array_equal(s, a + b)
    g = jc.jit(lambda x: x * 2)
    xs = [a, a.reshape(1024, -1), a.astype(F64)[: LARGE // 2]]
    outs = [g(x) for x in xs]                      # alive together: all distinct memory
    for i, o in enumerate(outs):
        assert isinstance(o.base, output_cache._Lease)
        assert o.dtype == xs[i].dtype and np.array_equal(o, xs[i] * 2)
        for j in range(i):
            assert not _overlap(o, outs[j])


def test_small_outputs_keep_numpys_allocator():
    f = jc.jit(_relu_affine)
    x = make((1000,), F32, rng=rng_for("small"))
    r = f(x, x, x)
    assert r.flags.owndata and r.base is None


def test_the_setting(monkeypatch):
    monkeypatch.setenv("JITCORE_OUTPUT_CACHE_MB", "7")
    assert config.from_env().output_cache_bytes == 7 << 20
    monkeypatch.setenv("JITCORE_OUTPUT_CACHE_MB", "0")
    assert config.from_env().output_cache_bytes == 0
    monkeypatch.setenv("JITCORE_OUTPUT_CACHE_MB", "lots")
    with pytest.warns(RuntimeWarning, match="JITCORE_OUTPUT_CACHE_MB"):
        assert config.from_env().output_cache_bytes == 256 << 20
    assert output_cache.enabled_for(MIN_BYTES) == (output_cache.CACHE.limit >= MIN_BYTES + 4096)
    assert not output_cache.enabled_for(MIN_BYTES - 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_has_its_own_cache(large_args):
    """The child starts with no idle blocks; its outputs, and the parent's outputs alive at
    the fork, are its own copy-on-write memory: writes on either side never show on the
    other."""
    a, b, c = large_args
    f = jc.jit(_relu_affine)
    first = f(a, b, c)
    live = f(a, b, c)                             # (first is still alive: its own block)
    del first                                     # leaves an idle block
    assert jc.cache_info()["output_cache_bytes"] > 0
    snapshot = live[:1000].copy()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                  # the child
        code = 1
        try:
            ok = jc.cache_info()["output_cache_bytes"] == 0
            mine = f(a, b, c)
            ok = ok and np.allclose(mine, live) and not _overlap(mine, live)
            live[:1000] = -1.0                    # the parent's array, the child's copy
            del mine
            again = f(a * 0, b, c)
            ok = ok and bool((again == np.maximum(c, 0) * 0.5).all())
            code = 0 if ok else 2
        finally:
            os.write(w, bytes([code]))
            os._exit(code)
    os.close(w)
    status = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert status == b"\x00"
    assert np.array_equal(live[:1000], snapshot)  # the child's writes stayed in the child
