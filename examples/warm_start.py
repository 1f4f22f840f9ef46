"""Cold vs warm start: the first call of a few graphs in a fresh process, with an empty disk
cache (trace, passes, LLVM O3, machine code, link) and again in a new process that finds the
graph stored whole on disk (trace, passes, load, link: no IR generated). Medians of --repeat
process pairs, each pair with its own cache directory.

    python examples/warm_start.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import jitcore as jc
rng = np.random.default_rng(0)
name = sys.argv[1]
if name == "chain10":
    args = [rng.standard_normal(4096).astype(np.float32) for _ in range(3)]
    fn = lambda a, b, c: jc.relu((a * b + c - 0.5) * 2.0 / (jc.abs(a) + 1.0)) + b * c - a
elif name == "softmax_gelu":
    args = [rng.standard_normal((256, 512)).astype(np.float32)]
    fn = lambda x: jc.gelu(jc.softmax(x, axis=-1) * 4.0 - 1.0)
else:
    args = [rng.standard_normal((512, 512)).astype(np.float32),
            rng.standard_normal((512, 512)).astype(np.float32),
            rng.standard_normal(512).astype(np.float32)]
    fn = lambda x, w, b: jc.gelu(x @ w + b)
jc.jit(lambda a: a + 1.0)(np.ones(4, np.float32))   # import and the first-use setup apart
f = jc.jit(fn)
t1 = time.perf_counter()
f(*args)
t2 = time.perf_counter()
print(json.dumps({"first_call_ms": 1e3 * (t2 - t1), "disk_hits": jc.cache_info()["disk_hits"]}))
"""

GRAPHS = ["chain10", "softmax_gelu", "linear_gelu"]


def first_call(name: str, cache_dir: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "JITCORE_CACHE_DIR": cache_dir}
    env.pop("JITCORE_DISK_CACHE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True,
                         env=env, timeout=300, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    opts = ap.parse_args()
    print(f"{'graph':<14} {'cold first call':>16} {'warm first call':>16} {'ratio':>7}")
    for name in GRAPHS:
        cold, warm = [], []
        for _ in range(opts.repeat):
            with tempfile.TemporaryDirectory() as d:
                c, w = first_call(name, d), first_call(name, d)
                assert c["disk_hits"] == 0 and w["disk_hits"] >= 1, (c, w)
                cold.append(c["first_call_ms"])
                warm.append(w["first_call_ms"])
        c, w = statistics.median(cold), statistics.median(warm)
        print(f"{name:<14} {c:>13.1f} ms {w:>13.1f} ms {c / w:>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
