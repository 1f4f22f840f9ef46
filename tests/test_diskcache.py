"""The on-disk cache of compiled code: a warm start skips LLVM, entries are private,
checksummed and target-bound, and a damaged entry is rebuilt (jitcore/cache/disk.py)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = str(Path(__file__).resolve().parents[1])

SCRIPT = """
import json, os, time, numpy as np, jitcore as jc
from jitcore import parallel
generated = []                         # the runtime's IR, generated when not found by recipe
build_pool_module = parallel.build_pool_module
parallel.build_pool_module = lambda *a: generated.append(1) or build_pool_module(*a)
parallel.pool()                        # the runtime's library: entries of its own, built first
base = jc.cache_info()
root = base["disk_dir"]
before = set(os.listdir(root)) if root else set()
x = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 1000
w = np.ones((48, 40), np.float32) / 48
f = jc.jit(lambda a, w: jc.gelu(a @ w + 0.5) - jc.exp(-a.sum(axis=1, keepdims=True)))
r = f(x, w)
info = jc.cache_info()
new = sorted(set(os.listdir(root)) - before) if root else []
print(json.dumps({"hits": info["disk_hits"] - base["disk_hits"], "pool_hits": base["disk_hits"],
                  "pool_generated": len(generated), "pool_rejected": base["disk_rejected"],
                  "graph_hits": info["disk_graph_hits"], "graph_misses": info["disk_graph_misses"],
                  "rejected": info["disk_rejected"] - base["disk_rejected"],
                  "new": [os.path.join(root, n) for n in new if n.endswith(".jco")],
                  "sum": float(r.astype('float64').sum()),
                  "compiled": info["modules_compiled"] - base["modules_compiled"],
                  "generated": info["kernels_generated"] - base["kernels_generated"],
                  "loaded": info["kernels_loaded"] - base["kernels_loaded"],
                  "ir_lines": len(f.llvm_ir(x, w).splitlines())}))
"""


def run(cache_dir, **env):
    """Run SCRIPT; `hits`/`rejected` count the graph's entries (not the runtime's), `new` lists
    the entries the graph added (per distinct kernel its IR and its object, the graph
    module's object and the graph's manifest), `graph_hits`/`graph_misses` whether the graph
    was loaded whole (tests/test_diskcache_graph.py), `compiled` the modules LLVM compiled,
    `generated`/`loaded` the kernels whose IR was generated or came from the disk."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env={**os.environ,
                               "JITCORE_CACHE_DIR": str(cache_dir), **env}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def entries(cache_dir):
    return sorted(Path(cache_dir).glob("*.jco"))


def kind(path) -> str:
    """What an entry holds, as its header says: "object", "kernel-ir" or "graph"."""
    blob = Path(path).read_bytes()
    start = len(MAGIC) + 8 + 8 + 32
    header_len = int.from_bytes(blob[len(MAGIC):len(MAGIC) + 8], "little")
    return json.loads(blob[start:start + header_len])["kind"]


def of_kind(paths, wanted: str) -> list:
    return [p for p in paths if kind(p) == wanted]


MAGIC = b"JITCORE-OBJ-1\n"


def test_warm_start_loads_the_object_and_gives_the_same_result(tmp_path):
    cold = run(tmp_path)
    # two kernels (the GEMM, the row reduction): their IR and objects; the graph module's
    # object; the graph's manifest
    assert cold["compiled"] == 3 and cold["generated"] == 2 and len(cold["new"]) == 6
    assert [len(of_kind(cold["new"], k)) for k in ("kernel-ir", "object", "graph")] == [2, 3, 1]
    assert cold["hits"] == 0 and cold["pool_hits"] == 0 and cold["graph_misses"] == 1
    assert len(entries(tmp_path)) == 6 + 2       # and the runtime's object and its recipe
    assert cold["pool_generated"] == 1
    warm = run(tmp_path)
    assert warm["pool_generated"] == 0           # the runtime's object, found by recipe
    # the graph whole: its manifest and its modules' objects, no IR (generated or loaded)
    assert warm["graph_hits"] == 1 and warm["hits"] == 3 and warm["pool_hits"] == 1
    assert warm["sum"] == cold["sum"]
    assert warm["compiled"] == 0 and warm["generated"] == 0 and warm["loaded"] == 0
    assert warm["ir_lines"] == cold["ir_lines"] > 0          # optimized IR comes back too
    assert not warm["new"]


def test_directory_is_private(tmp_path):
    run(tmp_path / "cache")
    mode = stat.S_IMODE(os.stat(tmp_path / "cache").st_mode)
    assert mode == 0o700
    for entry in entries(tmp_path / "cache"):
        assert stat.S_IMODE(os.stat(entry).st_mode) & 0o077 == 0


@pytest.mark.parametrize("damage,damaged", [("truncate", "graph"), ("flip_payload", "object"),
                                            ("flip_header", "kernel-ir"),
                                            ("garbage", "object"), ("garbage", "recipe")])
def test_damaged_entry_is_detected_and_rebuilt(tmp_path, damage, damaged):
    cold = run(tmp_path)
    if damaged == "recipe":                  # the runtime's: its IR is generated again
        (recipe,) = of_kind(entries(tmp_path), "recipe")
        recipe.write_bytes(b"not an entry at all")
        again = run(tmp_path)
        assert again["pool_rejected"] == 1 and again["pool_generated"] == 1
        assert again["pool_hits"] == 1 and again["sum"] == cold["sum"]   # the same IR
        assert run(tmp_path)["pool_generated"] == 0                       # rewritten
        return
    entry = Path(of_kind(cold["new"], damaged)[0])
    if damaged == "kernel-ir":              # read only when the graph is not stored whole
        Path(of_kind(cold["new"], "graph")[0]).unlink()
    blob = bytearray(entry.read_bytes())
    if damage == "truncate":
        blob = blob[:len(blob) // 2]
    elif damage == "flip_payload":
        blob[-100] ^= 0xFF
    elif damage == "flip_header":
        blob[len(b"JITCORE-OBJ-1\n") + 30] ^= 0x01
    else:
        blob = bytearray(b"not an entry at all")
    entry.write_bytes(bytes(blob))
    again = run(tmp_path)
    assert again["rejected"] == 1 and again["graph_hits"] == 0
    if damaged == "graph":                   # each module's IR and object, from disk
        assert again["hits"] == 5 and again["compiled"] + again["generated"] == 0
    elif damaged == "object":                # rebuilt from the IR on disk
        assert again["compiled"] == 1 and again["generated"] == 0
    else:                                    # regenerated: the same IR, its object on disk
        assert again["hits"] == 4 and again["generated"] == 1 and again["compiled"] == 0
    assert again["sum"] == cold["sum"]
    whole = run(tmp_path)                    # rewritten, valid again
    assert whole["graph_hits"] == 1 and whole["hits"] == 3 and whole["rejected"] == 0


def _two_widths():
    """(this process's vector width, another width the CPU can compile for): the next
    narrower one, or the next wider one when this is already the narrowest."""
    import jitcore as jc
    info = jc.target_info()
    here = info["vector_bits"]
    others = [w for w in (512, 256, 128) if w != here and w <= info["max_vector_bits"]]
    narrower = [w for w in others if w < here]
    return here, (narrower[0] if narrower else others[0] if others else None)


def test_entry_of_another_target_is_never_loaded(tmp_path):
    """An entry built for another vector width, renamed to this width's key, is refused: the
    header records the target and must match this process's."""
    here, other = _two_widths()
    if other is None:
        pytest.skip("the CPU compiles for one vector width only")
    this_dir, other_dir = tmp_path / "this", tmp_path / "other"
    these = run(this_dir, JITCORE_VECTOR_WIDTH=str(here))["new"]
    others = run(other_dir, JITCORE_VECTOR_WIDTH=str(other))["new"]
    assert not {Path(p).name for p in these} & {Path(p).name for p in others}  # target in key
    for wanted in ("graph", "object"):      # the manifest and a module's object
        Path(of_kind(these, wanted)[0]).write_bytes(Path(of_kind(others, wanted)[0]).read_bytes())
    result = run(this_dir, JITCORE_VECTOR_WIDTH=str(here))
    # both refused: the graph compiles from its modules' IR, one of them by LLVM again
    assert result["rejected"] == 2 and result["graph_hits"] == 0 and result["compiled"] == 1
    assert result["hits"] == len(of_kind(these, "kernel-ir")) + len(of_kind(these, "object")) - 1


def test_disk_cache_can_be_turned_off(tmp_path):
    run(tmp_path / "off", JITCORE_DISK_CACHE="0")
    assert not (tmp_path / "off").exists() or not entries(tmp_path / "off")


def test_a_directory_others_can_write_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    proc = subprocess.run([sys.executable, "-W", "always", "-c", SCRIPT], capture_output=True,
                          text=True, env={**os.environ,
                                          "JITCORE_CACHE_DIR": str(shared)}, timeout=300)
    assert proc.returncode == 0 and "not using the disk cache" in proc.stderr
    assert not entries(shared)


def test_entries_hold_no_pickles():
    source = (Path(REPO) / "jitcore" / "cache" / "disk.py").read_text()
    assert "pickle" not in source.replace("nothing is unpickled", "")


def test_directory_stays_within_its_size_bound(tmp_path):
    """JITCORE_DISK_CACHE_MB: the least recently used entries go (the newest stay), and so
    does a stale temporary file from a killed writer."""
    stale = tmp_path / ".tmp-killed.jco"
    stale.write_bytes(b"x" * 100)
    os.utime(stale, (1, 1))
    code = """
import json, os, numpy as np, jitcore as jc
x = np.ones(16, np.float32)
first = jc.jit(lambda a: a * -1.0 + 0.5)
first(x)
for k in range(150):
    jc.jit(lambda a, k=k: jc.tanh(a) * float(k))(x)
    if k % 10 == 0:
        first(np.ones(16 + k, np.float32))          # kept in use
size = sum(e.stat().st_size for e in os.scandir(os.environ["JITCORE_CACHE_DIR"]))
print(json.dumps({"size": size, "evicted": jc.cache_info()["disk_evicted"]}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ,
                               "JITCORE_CACHE_DIR": str(tmp_path),
                               "JITCORE_DISK_CACHE_MB": "0.25"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["size"] <= 0.25 * 2**20 and r["evicted"] > 0, r
    assert not stale.exists()
    assert len(entries(tmp_path)) > 5                  # evicts down to 3/4, not everything
    again = subprocess.run([sys.executable, "-c", """
import numpy as np, jitcore as jc
from jitcore import parallel
parallel.pool()
info = jc.cache_info()
jc.jit(lambda a, k=149: jc.tanh(a) * float(k))(np.ones(16, np.float32))
after = jc.cache_info()
print(after["disk_graph_hits"], after["disk_hits"] - info["disk_hits"],
      after["modules_compiled"] - info["modules_compiled"]
      + after["kernels_generated"] - info["kernels_generated"])
"""], capture_output=True, text=True, timeout=120,
        env={**os.environ, "JITCORE_CACHE_DIR": str(tmp_path)})
    whole, hits, compiled = map(int, again.stdout.split()[-3:])
    # the newest entries stayed: the manifest, the kernel's and the graph module's objects
    assert whole == 1 and hits == 2 and compiled == 0, again.stderr[-2000:]


def test_processes_writing_the_same_entries_at_once(tmp_path):
    """Two cold processes store the same entries (objects, kernel IR, the graph's manifest,
    the runtime's recipe) at the same time: each write is a rename of a whole file, so the
    next process reads only valid entries and loads the graph whole."""
    env = {**os.environ, "JITCORE_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    sums = {json.loads(out.strip().splitlines()[-1])["sum"] for out, _ in outs}
    assert not list(tmp_path.glob(".tmp-*"))                 # no half-written entry left
    warm = run(tmp_path)
    assert warm["rejected"] == 0 and warm["pool_rejected"] == 0
    assert warm["graph_hits"] == 1 and warm["compiled"] == 0 and warm["pool_generated"] == 0
    assert sums == {warm["sum"]}
