"""Command line: `python -m jitcore demo`, `python -m jitcore info` and
`python -m jitcore bench [options]` (see jitcore/bench/cli.py), `python -m jitcore bench
--models [options]` (whole PyTorch models: jitcore/bench/model_suite.py), `python -m jitcore
bench --render FILE` (a saved result's README tables: jitcore/bench/markdown.py), `python -m
jitcore bench --zoo [options]` (transformers' architectures: jitcore/bench/zoo_suite.py),
`python -m jitcore profile script.py [args]` (time per kernel under Linux perf:
jitcore/profile_cli.py)."""
from __future__ import annotations

import argparse
import re
import sys
import time

import numpy as np


def _demo_graph():
    import jitcore as jc

    @jc.jit
    def attention_row(scores, mask, bias):
        """Masked, biased softmax over rows, then a GELU: a typical fused block."""
        masked = jc.where(mask, scores + bias, -1e9)
        return jc.gelu(jc.softmax(masked, axis=-1) * 4.0, approximate="tanh")
    return attention_row


def _reference(scores, mask, bias):
    s = np.where(mask, scores + bias, -1e9).astype(np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    y = e / e.sum(axis=-1, keepdims=True) * 4.0
    return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))


def _vector_lines(ir_text: str, limit: int = 6) -> list:
    lines = [ln.strip() for ln in ir_text.splitlines() if re.search(r"<\d+ x (float|double)>", ln)
             and ("load" in ln or "fmul" in ln or "store" in ln)]
    return lines[:limit]


def demo() -> int:
    import jitcore as jc
    info = jc.target_info()
    print(f"jitcore {jc.__version__} on {info['brand']} ({info['host_cpu']}): target "
          f"{info['level']} ({info['cpu']}), {info['isa']}, {info['vector_bits']}-bit vectors")
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((512, 1000), dtype=np.float32)
    mask = rng.random((512, 1000)) > 0.1
    bias = rng.standard_normal(1000, dtype=np.float32)
    f = _demo_graph()

    t0 = time.perf_counter()
    y = f(scores, mask, bias)
    first = time.perf_counter() - t0
    print("\n== the traced graph ==")
    print(f.graph(scores, mask, bias))
    print("\n== what it compiled to ==")
    print(f.explain(scores, mask, bias).split("\n\n", 1)[1])
    print("\n== a few lines of the optimized LLVM IR (f.llvm_ir) ==")
    for line in _vector_lines(f.llvm_ir(scores, mask, bias)):
        print("  " + line[:110])
    zmm = len(re.findall(r"%zmm\d+", f.asm(scores, mask, bias)))
    print(f"  ... the asm (f.asm) uses zmm registers {zmm} times")

    err = np.abs(y - _reference(scores, mask, bias)).max()
    runs = []
    for _ in range(20):
        t0 = time.perf_counter()
        f(scores, mask, bias)
        runs.append(time.perf_counter() - t0)
    print("\n== running it ==")
    print(f"first call (trace + compile + run, and the one-time thread-pool build): "
          f"{first * 1e3:.1f} ms")
    print(f"median call: {np.median(runs) * 1e3:.3f} ms for {scores.size:,} elements")
    print(f"max abs error vs numpy float64: {err:.2e}")
    ok = err < 1e-5
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


def info() -> int:
    import jitcore as jc
    for k, v in jc.target_info().items():
        print(f"{k:16s} {' '.join(v) if isinstance(v, list) else v}")
    print(jc.parallel_info())
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["bench", "--render"]:
        from .bench.markdown import main as render
        return render(argv[2:])
    if argv[:1] == ["bench"] and "--zoo" in argv:
        from .bench.zoo_suite import main as zoo
        return zoo([a for a in argv[1:] if a != "--zoo"])
    if argv[:1] == ["bench"] and "--generate" in argv:
        from .bench.generate_suite import main as generate
        return generate([a for a in argv[1:] if a != "--generate"])
    if argv[:1] == ["bench"] and "--models" in argv:
        from .bench.model_suite import main as models
        return models([a for a in argv[1:] if a != "--models"])
    if argv[:1] == ["bench"]:
        from .bench.cli import main as bench
        return bench(argv[1:])
    if argv[:1] == ["profile"]:
        from .profile_cli import main as profile
        return profile(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m jitcore")
    parser.add_argument("command", choices=["demo", "info", "bench", "profile"], nargs="?", default="demo")
    args = parser.parse_args(argv)
    return {"demo": demo, "info": info}[args.command]()


if __name__ == "__main__":
    sys.exit(main())
