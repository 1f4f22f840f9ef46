"""A graph stored whole on disk (diskcache.GraphEntry): a warm start links the modules' stored
objects without generating any IR, gives the cold start's results, still shows its IR, asm and
dumps on request, and falls back to a normal compile when its manifest or a module is damaged,
foreign or gone. In-process: each "process" here is a fresh set of in-memory caches over one
disk cache directory (as in test_logging)."""
from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import jitcore as jc
from jitcore import compiler, config
from jitcore.cache import disk as diskcache
from jitcore.llvm import engine, graph_module
from jitcore.cache.lru import LRU

from helpers import assert_close, erf64, f64, layer_norm_ref, reduction_tol, ref_conv2d, softmax_ref

RNG = np.random.default_rng(25)
COUNTERS = ("disk_graph_hits", "disk_graph_misses", "disk_hits", "disk_rejected",
            "kernels_generated", "kernels_loaded", "modules_compiled")


@pytest.fixture
def cache_dir(monkeypatch, tmp_path):
    """An empty disk cache for this test, and empty in-memory caches."""
    monkeypatch.setenv("JITCORE_CACHE_DIR", str(tmp_path / "cache"))
    new_process(monkeypatch)
    return tmp_path / "cache"


def new_process(monkeypatch):
    """Empty in-memory caches (compiled graphs, kernels' IR, LLVM objects): what a new
    process has, the disk cache aside."""
    monkeypatch.setattr(compiler, "_CACHE", LRU())
    monkeypatch.setattr(graph_module, "_EMITTED", type(graph_module._EMITTED)())
    monkeypatch.setattr(engine, "OBJECTS", engine.ObjectCache())


def counted(fn):
    """(fn(), the COUNTERS' increase while it ran)."""
    before = jc.cache_info()
    out = fn()
    after = jc.cache_info()
    return out, {k: after[k] - before[k] for k in COUNTERS}


def entries_of_kind(root, kind: str) -> list:
    """The cache entries whose header says `kind` ("object", "kernel-ir", "graph")."""
    found = []
    for path in sorted(Path(root).glob("*.jco")):
        blob = path.read_bytes()
        start = len(diskcache.MAGIC) + diskcache._HEADER.size
        header_len = diskcache._HEADER.unpack_from(blob, len(diskcache.MAGIC))[0]
        if json.loads(blob[start:start + header_len])["kind"] == kind:
            found.append(path)
    return found


def count_passes(monkeypatch) -> list:
    """A list that grows by one each time the compile driver runs the passes."""
    calls, run_pipeline = [], compiler.run_pipeline

    def counting(*args, **kwargs):
        calls.append(1)
        return run_pipeline(*args, **kwargs)
    monkeypatch.setattr(compiler, "run_pipeline", counting)
    return calls


def randn(*shape, dtype=np.float32):
    return (RNG.standard_normal(shape) * 0.5).astype(dtype)


def _mlp(x, w1, b1, w2):
    return jc.relu(x @ w1 + b1) @ w2


def _forked(x, w):
    fut = jc.fork(lambda a: jc.exp(a).sum(axis=1), x)
    return (x @ w).sum(axis=1) + jc.wait(fut)


# name -> (function, arguments, float64 reference, tolerances for assert_close)
F32_SUMS = dict(zip(("rtol", "atol"), reduction_tol(np.float32, 512, 8.0)))
GRAPHS = {
    "elementwise_f32": (lambda a, b: a * b + 1.0, (randn(1000), randn(1000)),
                        lambda a, b: f64(a) * b + 1.0, dict(rtol=1e-6, atol=1e-6)),
    "elementwise_f64": (lambda a: jc.tanh(a) - a, (randn(7, 33, dtype=np.float64),),
                        lambda a: np.tanh(a) - a, dict(rtol=1e-12, atol=1e-13)),
    "int32": (lambda a, b: (a * b) // 3 + a, (RNG.integers(-50, 50, (40, 9), np.int32),
                                              RNG.integers(1, 50, (40, 9), np.int32)),
              lambda a, b: (a * b) // 3 + a, dict(exact=True)),
    "softmax": (lambda a: jc.softmax(a, axis=-1), (randn(64, 100),), softmax_ref, F32_SUMS),
    "layer_norm": (lambda a, g, b: jc.layer_norm(a, g, b), (randn(16, 96), randn(96), randn(96)),
                   layer_norm_ref, F32_SUMS),
    "mlp": (_mlp, (randn(32, 64), randn(64, 48), randn(48), randn(48, 16)),
            lambda x, w1, b1, w2: np.maximum(f64(x) @ w1 + b1, 0) @ w2, F32_SUMS),
    "forked_task": (_forked, (randn(24, 40), randn(40, 8)),
                    lambda x, w: (f64(x) @ w).sum(axis=1) + np.exp(f64(x)).sum(axis=1),
                    F32_SUMS),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_warm_hit_generates_no_ir_and_gives_the_cold_result(cache_dir, monkeypatch, name):
    fn, args, ref, tol = GRAPHS[name]
    cold_f = jc.jit(fn)
    cold, c = counted(lambda: cold_f(*args))
    assert c["disk_graph_misses"] == 1 and c["disk_graph_hits"] == 0
    assert c["kernels_generated"] + c["kernels_loaded"] > 0
    cold_ir = cold_f.llvm_ir(*args, optimized=False)
    assert len(entries_of_kind(cache_dir, "graph")) == 1

    new_process(monkeypatch)
    passes = count_passes(monkeypatch)
    warm_f = jc.jit(fn)
    warm, w = counted(lambda: warm_f(*args))
    assert passes == [], "a graph without constants is stored with its call layout"
    assert w["disk_graph_hits"] == 1 and w["disk_graph_misses"] == 0, w
    # neither IR generation (not even IR loaded from disk) nor LLVM
    assert w["kernels_generated"] == w["kernels_loaded"] == w["modules_compiled"] == 0, w
    assert w["disk_hits"] >= 2 and w["disk_rejected"] == 0      # the objects, from disk
    assert warm.dtype == cold.dtype
    np.testing.assert_array_equal(warm, cold)                   # the same code
    assert_close(warm, ref(*args), args[0].dtype, **tol)

    report = warm_f.explain(*args)
    assert "whole graph from the disk cache" in report.splitlines()[-1]
    assert "passes 0.0" in report and "IR generation 0.0" in report
    assert "disk cache load" in report
    assert [str(k) for k in warm_f.kernels(*args)] == [str(k) for k in cold_f.kernels(*args)]
    assert passes == []
    # what the user asks for is still there: generated now, equal to the cold start's
    assert warm_f.llvm_ir(*args, optimized=False) == cold_ir     # (runs the passes now)
    assert len(passes) == 1
    assert warm_f.llvm_ir(*args) == cold_f.llvm_ir(*args)
    assert "ret" in warm_f.asm(*args)


def test_cold_compile_says_where_its_code_came_from(cache_dir, monkeypatch):
    f = jc.jit(lambda a: jc.exp(a) * 3.0)
    x = randn(50)
    f(x)
    assert "; " not in f.explain(x).splitlines()[-1]             # LLVM built it all
    new_process(monkeypatch)
    for path in entries_of_kind(cache_dir, "graph"):             # modules on disk, no manifest
        path.unlink()
    g = jc.jit(lambda a: jc.exp(a) * 3.0)
    _, counts = counted(lambda: g(x))
    assert counts["disk_graph_misses"] == 1 and counts["modules_compiled"] == 0
    assert g.explain(x).splitlines()[-1].endswith("; machine code from the disk cache)")
    assert len(entries_of_kind(cache_dir, "graph")) == 1         # and stored whole again


@pytest.mark.parametrize("prepack", [True, False])
def test_constant_weights_prepacked_on_a_warm_hit(cache_dir, monkeypatch, prepack):
    """Prepacking rewrites the lowered graph's constants, which the call path passes to the
    kernels: a warm hit packs them again (the stored code reads the packed layout)."""
    w1, b1, w2 = randn(64, 48), randn(48), randn(48, 24)
    conv_w = randn(8, 3, 3, 3)
    x, img = randn(32, 64), randn(2, 3, 10, 10)

    def fn(x, img, w1, b1, w2, conv_w):
        return _mlp(x, w1, b1, w2), jc.relu(jc.conv2d(img, conv_w, padding=1))

    consts = {"w1": w1, "b1": b1, "w2": w2, "conv_w": conv_w}
    cold = jc.jit(fn, constants=consts, prepack_weights=prepack)(x, img)
    new_process(monkeypatch)
    passes = count_passes(monkeypatch)
    f = jc.jit(fn, constants=consts, prepack_weights=prepack)
    warm, counts = counted(lambda: f(x, img))
    assert counts["disk_graph_hits"] == 1 and counts["modules_compiled"] == 0
    assert passes == [1]          # constants are not stored: the passes (and packing) run
    assert ("prepacked" in f.explain(x, img)) == prepack
    for got, old in zip(warm, cold):
        np.testing.assert_array_equal(got, old)
    assert_close(warm[0], np.maximum(f64(x) @ w1 + b1, 0) @ w2, np.float32, **F32_SUMS)
    conv_ref, magnitude = ref_conv2d(img, conv_w, padding=1)
    assert_close(warm[1], np.maximum(conv_ref, 0), np.float32, scale=magnitude, **F32_SUMS)


def test_several_outputs_and_index_checks_from_a_stored_layout(cache_dir, monkeypatch):
    """The call layout a graph is stored with: outputs in their order, dtypes and shapes,
    and the gathers' index checks (an out-of-range index still raises IndexError)."""
    def fn(w, i, x):
        return w[i] + 1.0, (x * 2).astype(jc.int32), x.sum()
    w = randn(50, 19)
    ids = np.array([3, 49, 0, 7], np.int64)
    x = RNG.integers(-9, 9, (6, 5)).astype(np.int64)
    cold = jc.jit(fn)(w, ids, x)
    new_process(monkeypatch)
    passes = count_passes(monkeypatch)
    f = jc.jit(fn)
    warm, counts = counted(lambda: f(w, ids, x))
    assert counts["disk_graph_hits"] == 1 and passes == []
    assert len(warm) == len(cold) == 3
    for got, old in zip(warm, cold):
        assert got.dtype == old.dtype and got.shape == old.shape
        np.testing.assert_array_equal(got, old)
    assert_close(warm[0], f64(w)[ids] + 1.0, np.float32)
    assert_close(warm[1], (x * 2).astype(np.int32), np.int32)
    assert_close(warm[2], x.sum(), np.int64)
    bad = ids.copy()
    bad[1] = 50
    with pytest.raises(IndexError, match="take: index 50 is out of bounds for axis 0 with "
                                         "size 50"):
        f(w, bad, x)


def test_prepacking_and_threads_are_part_of_the_key(cache_dir, monkeypatch):
    w, x = randn(64, 40), randn(16, 64)
    variants = [dict(prepack_weights=True), dict(prepack_weights=False),
                dict(prepack_weights=True, num_threads=1),
                dict(prepack_weights=True, num_threads=2)]
    for options in variants:
        jc.jit(lambda a, w: a @ w, constants={"w": w}, **options)(x)
    assert len(entries_of_kind(cache_dir, "graph")) == len(variants)
    new_process(monkeypatch)
    for options in variants:
        f = jc.jit(lambda a, w: a @ w, constants={"w": w}, **options)
        got, counts = counted(lambda: f(x))
        assert counts["disk_graph_hits"] == 1, options
        assert_close(got, f64(x) @ w, np.float32, **F32_SUMS)


def test_dynamic_shapes_hit_whole(cache_dir, monkeypatch):
    def fn(x, w):
        return jc.gelu(x @ w) + x.sum(axis=1, keepdims=True)
    w = randn(24, 24)
    jc.jit(fn, dynamic=True)(randn(8, 24), w)
    new_process(monkeypatch)
    f = jc.jit(fn, dynamic=True)
    hits = 0
    for batch in (8, 13, 1000):
        x = randn(batch, 24)
        got, counts = counted(lambda: f(x, w))
        assert counts["modules_compiled"] == counts["kernels_generated"] == 0, batch
        assert counts["disk_graph_misses"] == 0, batch
        hits += counts["disk_graph_hits"]
        ref = f64(x) @ w
        ref = 0.5 * ref * (1 + erf64(ref / np.sqrt(2)))
        assert_close(got, ref + f64(x).sum(axis=1, keepdims=True), np.float32, **F32_SUMS)
    assert hits == 1                            # one shape class, loaded whole once
    assert "whole graph from the disk cache" in f.explain(randn(5, 24), w)


def test_dump_dir_after_a_warm_hit(cache_dir, monkeypatch, tmp_path):
    fn, args, _, _ = GRAPHS["mlp"]
    cold_ir = jc.jit(fn).llvm_ir(*args, optimized=False)
    new_process(monkeypatch)
    dumps = tmp_path / "dumps"
    with config.override(dump_dir=str(dumps)):
        _, counts = counted(lambda: jc.jit(fn)(*args))
    assert counts["disk_graph_hits"] == 1
    names = sorted(os.listdir(dumps))
    for ext in ("graph.txt", "kernels.txt", "ll", "opt.ll", "s"):
        assert any(n.endswith("." + ext) for n in names), (ext, names)
    ll = next(n for n in names if n.endswith(".ll") and not n.endswith(".opt.ll"))
    assert (dumps / ll).read_text() == cold_ir
    kernels = next(n for n in names if n.endswith(".kernels.txt"))
    assert "whole graph from the disk cache" in (dumps / kernels).read_text()


def _rewrite_manifest(path: Path, text: str) -> None:
    """A well-formed entry (valid checksum, this target) holding `text` as its manifest."""
    blob = path.read_bytes()
    start = len(diskcache.MAGIC) + diskcache._HEADER.size
    header_len = diskcache._HEADER.unpack_from(blob, len(diskcache.MAGIC))[0]
    header = json.loads(blob[start:start + header_len])
    assert header["kind"] == "graph"
    os.remove(path)
    diskcache.store(header["key"], _target_key(), b"", text, "graph")
    assert path.exists()


def _target_key():
    from jitcore.targetinfo import select_target
    return select_target().key()


def _manifest(path: Path) -> dict:
    key = path.name[:-len(".jco")]
    return json.loads(diskcache.load(key, _target_key())[1])


DAMAGES = ["truncated", "flipped_byte", "not_json", "wrong_format", "unknown_field",
           "export_missing", "layout_not_a_dict", "layout_outputs_shuffled",
           "layout_bad_dtype", "module_gone", "module_unknown", "module_damaged",
           "foreign_target"]


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_manifest_or_module_falls_back_to_a_compile(cache_dir, monkeypatch, damage):
    fn, args, ref, tol = GRAPHS["mlp"]
    cold = jc.jit(fn)(*args)
    (path,) = entries_of_kind(cache_dir, "graph")
    manifest = _manifest(path)
    objects = [cache_dir / f"{k}.jco" for k in manifest["modules"]]
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:-7])
    elif damage == "flipped_byte":
        blob = bytearray(path.read_bytes())
        blob[-3] ^= 0x10
        path.write_bytes(bytes(blob))
    elif damage == "not_json":
        _rewrite_manifest(path, "{not json")
    elif damage == "wrong_format":
        _rewrite_manifest(path, json.dumps({**manifest, "format": 999}))
    elif damage == "unknown_field":
        _rewrite_manifest(path, json.dumps({**manifest, "extra": 1}))
    elif damage == "export_missing":
        _rewrite_manifest(path, json.dumps({**manifest, "exports": manifest["exports"][1:]}))
    elif damage == "layout_not_a_dict":
        _rewrite_manifest(path, json.dumps({**manifest, "layout": [1, 2]}))
    elif damage == "layout_outputs_shuffled":
        layout = {**manifest["layout"], "out_index": [1]}
        _rewrite_manifest(path, json.dumps({**manifest, "layout": layout}))
    elif damage == "layout_bad_dtype":
        layout = {**manifest["layout"], "outputs": [[[32, 16], "float16"]]}
        _rewrite_manifest(path, json.dumps({**manifest, "layout": layout}))
    elif damage == "module_gone":
        objects[0].unlink()
    elif damage == "module_unknown":
        fake = hashlib.sha256(b"no such module").hexdigest()
        _rewrite_manifest(path, json.dumps({**manifest, "modules": [fake]
                                            + manifest["modules"]}))
    elif damage == "module_damaged":
        blob = bytearray(objects[-1].read_bytes())
        blob[-5] ^= 0x01
        objects[-1].write_bytes(bytes(blob))
    else:                    # the header records another CPU: never loaded
        blob = path.read_bytes()
        start = len(diskcache.MAGIC) + diskcache._HEADER.size
        header_len, payload_len, _ = diskcache._HEADER.unpack_from(blob, len(diskcache.MAGIC))
        header = json.loads(blob[start:start + header_len])
        header["target"][1] = "another-cpu"
        new_header = json.dumps(header).encode()
        payload = blob[start + header_len:]
        digest = hashlib.sha256(new_header + payload).digest()
        path.write_bytes(diskcache.MAGIC + struct.pack("<QQ32s", len(new_header), payload_len,
                                                       digest) + new_header + payload)

    new_process(monkeypatch)
    got, counts = counted(lambda: jc.jit(fn)(*args))
    if damage.startswith("module"):
        # the manifest was fine, a module was not: compiled, not loaded whole
        assert counts["disk_graph_hits"] == 0 and counts["disk_graph_misses"] == 1, counts
    else:
        assert counts["disk_rejected"] == 1, counts
        assert counts["disk_graph_hits"] == counts["disk_graph_misses"] == 0, counts
    np.testing.assert_array_equal(got, cold)
    assert_close(got, ref(*args), np.float32, **tol)
    # rewritten: the next process loads the graph whole again
    new_process(monkeypatch)
    again, counts = counted(lambda: jc.jit(fn)(*args))
    assert counts["disk_graph_hits"] == 1 and counts["modules_compiled"] == 0, counts
    assert counts["kernels_generated"] == counts["kernels_loaded"] == 0
    np.testing.assert_array_equal(again, cold)


def test_disk_cache_off_stores_no_manifest(cache_dir, monkeypatch):
    monkeypatch.setenv("JITCORE_DISK_CACHE", "0")
    _, counts = counted(lambda: jc.jit(lambda a: a - 2.5)(randn(10)))
    assert counts["disk_graph_hits"] == counts["disk_graph_misses"] == 0
    assert not cache_dir.exists() or not list(cache_dir.glob("*.jco"))
