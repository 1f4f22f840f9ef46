"""Sizes read in Python under dynamic=True: compiles over 10 sizes per pattern, and the
per-call time of the dynamic code over the static code's (same run, interleaved medians).

    python examples/symbolic_sizes.py [--models] [--repeat 5]

--models adds tiny HF BERT and GPT-2 through jitcore.torch.compile(..., dynamic=True) over
sequence lengths 16-512: compiles, and time per call against a static compile per length.
"""
import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jitcore as jc  # noqa: E402
from timing import median_time  # noqa: E402

PATTERNS = {
    "x / np.sqrt(T)": lambda x: x / np.sqrt(x.shape[1]),
    "x * T ** -0.5": lambda x: x * x.shape[1] ** -0.5,
    "x - sum(x, 1) / T": lambda x: x - x.sum(axis=1, keepdims=True) / x.shape[1],
    "x.mean(axis=1)": lambda x: x.mean(axis=1),
    "x.reshape(B * T, -1) * 2": lambda x: x.reshape(x.shape[0] * x.shape[1], -1) * 2.0,
    "x / math.sqrt(T) (specializes)": lambda x: x / math.sqrt(x.shape[1]),
    "if B > 3 (specializes)": lambda x: x * 2.0 if x.shape[0] > 3 else x - 1.0,
}
SIZES = [(8, 16), (3, 17), (16, 64), (5, 31), (2, 128), (7, 100), (4, 256), (9, 7), (6, 48),
         (8, 512)]


def compiles() -> int:
    return jc.cache_info()["compiles"]


def patterns(repeat: int) -> None:
    rng = np.random.default_rng(0)
    print("| pattern | compiles for 10 (B, T) | static | dynamic | dynamic / static |")
    print("|---|---|---|---|---|")
    for name, fn in PATTERNS.items():
        f = jc.jit(fn, dynamic=True)
        before = compiles()
        for B, T in SIZES:
            x = rng.standard_normal((B, T, 64)).astype(np.float32)
            np.testing.assert_allclose(f(x), fn(x), rtol=2e-6, atol=2e-6)
        count = compiles() - before
        x = rng.standard_normal((8, 512, 256)).astype(np.float32)
        static = jc.jit(fn)
        static(x), f(x)
        ts, td = [], []
        for _ in range(repeat):                       # interleaved: the same machine state
            ts.append(median_time(lambda: static(x), repeat=3))
            td.append(median_time(lambda: f(x), repeat=3))
        s, d = np.median(ts), np.median(td)
        print(f"| `{name}` | {count} | {s * 1e3:.2f} ms | {d * 1e3:.2f} ms | {d / s:.2f} |")


def models(repeat: int) -> None:
    import torch
    import transformers
    import jitcore.torch as jt
    torch.manual_seed(0)
    made = {
        "BERT (2 layers, 128 wide)": (transformers.BertModel(transformers.BertConfig(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=512, vocab_size=1000)), 2),
        "GPT-2 (2 layers, 128 wide)": (transformers.GPT2Model(transformers.GPT2Config(
            n_embd=128, n_layer=2, n_head=4, vocab_size=1000, use_cache=False)), 1),
    }
    lengths = [16, 24, 32, 48, 64, 96, 128, 200, 256, 512]
    print("\n| model | compiles for 10 lengths | T | static | dynamic | dynamic / static |")
    print("|---|---|---|---|---|---|")
    for name, (m, batch) in made.items():
        m = m.eval()
        t0 = time.perf_counter()
        dyn = jt.compile(m, torch.randint(0, 1000, (batch, lengths[0])), dynamic=True)
        first = time.perf_counter() - t0
        before = compiles()
        with torch.no_grad():
            for T in lengths:
                dyn(torch.randint(0, 1000, (batch, T)))
        count = compiles() - before
        for T in (16, 128, 512):
            ids = torch.randint(0, 1000, (batch, T))
            static = jt.compile(m, ids)
            ts, td = [], []
            with torch.no_grad():
                for _ in range(repeat):
                    ts.append(median_time(lambda: static(ids), repeat=3))
                    td.append(median_time(lambda: dyn(ids), repeat=3))
            s, d = np.median(ts), np.median(td)
            print(f"| {name} | {count} (first compile {first:.1f} s) | {T} | "
                  f"{s * 1e3:.2f} ms | {d * 1e3:.2f} ms | {d / s:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    jc.set_num_threads(1)
    patterns(args.repeat)
    if args.models:
        models(args.repeat)


if __name__ == "__main__":
    main()
