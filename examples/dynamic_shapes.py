"""Shapes that vary: `jc.jit(fn, dynamic=True)` against the static code of the same function.

For the benchmark suite's graphs (their sizes; 1 thread): the per-call time of the dynamic
code against the static code at the same shape, interleaved (static, dynamic, static, ...),
medians of --repeat rounds of --calls calls; then the compiles one dynamic function takes
across 10 leading sizes (the suite's and 9 smaller ones: the batch), each result checked
against the static code's. Then the sequence-length sweep (--only seq): the attention graphs
at several sequence lengths, dynamic against static at each, and the compiles for 10 lengths.

    python examples/dynamic_shapes.py [--repeat 7] [--calls 5] [--only chain,softmax,seq]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import jitcore as jc
from jitcore.bench import workloads as wl

# suite graphs whose leading axis is a batch (rows): everything but pooling, convolution
# and the forked-task graph, which compile per shape under dynamic=True (explain says why)
GRAPHS = ["chain", "gelu_tanh", "dispatch_1024", "softmax", "layer_norm", "row_sum",
          "col_sum", "broadcast3", "masked_row_max", "linear_gelu", "mlp2"]
S, D, H = 128, 256, 4


def attention(x, wq, wk, wv, wo):
    """An encoder layer's attention: batch x sequence 128 x width 256, 4 heads."""
    B, T, _ = x.shape

    def heads(t):
        return t.reshape(B, T, H, D // H).transpose((0, 2, 1, 3))
    q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
    att = jc.softmax(q @ k.transpose((0, 1, 3, 2)) * (1.0 / 8.0), axis=-1)
    return jc.layer_norm((att @ v).transpose((0, 2, 1, 3)).reshape(B, T, D) @ wo + x)


def _attention_inputs(batch: int, rng) -> tuple:
    ws = [wl.randn(rng, D, D) * np.float32(D ** -0.5) for _ in range(4)]
    return (wl.randn(rng, batch, S, D), *ws)


def sdpa(q, k, v):
    """Scaled dot-product attention on [batch, heads, sequence, 64]: q @ k^T has N = T, the
    softmax rows are T long, att @ v has K = T."""
    return jc.softmax(q @ k.transpose((0, 1, 3, 2)) * 0.125, axis=-1) @ v


def _sdpa_inputs(t: int, rng) -> tuple:
    return tuple(wl.randn(rng, 8, H, t, 64) for _ in range(3))


SEQ_LENGTHS = [32, 128, 256]                            # timed
TEN_LENGTHS = [32, 128, 256, 16, 24, 48, 65, 100, 200, 255]   # compiles counted


def sequence_sweep(opts) -> None:
    """The attention graphs over sequence lengths (batch 8): dynamic against static at each
    timed length (interleaved), and the compiles one dynamic function takes for 10 lengths,
    each checked against the static code."""
    rng = np.random.default_rng(1)
    graphs = {"attention": (attention, lambda t: (wl.randn(rng, 8, t, D), *_attention_inputs(
                  8, rng)[1:])),
              "sdpa": (sdpa, lambda t: _sdpa_inputs(t, rng))}
    for name, (fn, make) in graphs.items():
        dyn = jc.jit(fn, dynamic=True)
        before = jc.cache_info()["compiles"]
        inputs = {t: make(t) for t in TEN_LENGTHS}
        results = {t: dyn(*a) for t, a in inputs.items()}
        count = jc.cache_info()["compiles"] - before
        for t in SEQ_LENGTHS:
            static = jc.jit(fn)
            np.testing.assert_allclose(results[t], static(*inputs[t]), rtol=1e-3, atol=1e-3)
            ts, td = [], []
            for _ in range(opts.repeat):
                ts.append(per_call(static, inputs[t], opts.calls))
                td.append(per_call(dyn, inputs[t], opts.calls))
            ms, md = statistics.median(ts), statistics.median(td)
            print(f"{name + ' T=' + str(t):16s} {ms * 1e3:8.2f}ms {md * 1e3:8.2f}ms "
                  f"{md / ms:6.2f}  {count:17d}  (compiles for 10 sequence lengths)")


def cases():
    """name -> (function, inputs at the suite's size, inputs at leading size n)."""
    rng = np.random.default_rng(0)
    out = {}
    for w in wl.SUITE:
        if w.name not in GRAPHS:
            continue
        sizes = w.shapes(False)
        args = w.inputs(sizes, rng)
        out[w.name] = (wl.JITCORE[w.name], args, lambda n, args=args: _resized(args, n))
    out["attention_b8"] = (attention, _attention_inputs(8, rng),
                           lambda n: _attention_inputs(n, np.random.default_rng(n)))
    return out


def _resized(args: tuple, n: int) -> tuple:
    """The arguments with every leading extent equal to the first one's set to n."""
    lead = args[0].shape[0]
    return tuple(np.resize(a, (n, *a.shape[1:])) if a.ndim and a.shape[0] == lead else a
                 for a in args)


def torch_encoder(opts) -> None:
    """jitcore.torch.compile(dynamic=True) of a transformer encoder layer (batch 8, sequence
    128, width 256, 4 heads) against the static compile at the same shape, and what 10
    batch sizes and 4 sequence lengths cost it: exports and compiles."""
    try:
        import torch
        import jitcore.torch as jt
    except ImportError:
        return
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True).eval()
    x = torch.randn(8, S, D)
    static, dyn = jt.compile(layer, x), jt.compile(layer, x, dynamic=True)
    torch.testing.assert_close(dyn(x), static(x), rtol=1e-4, atol=1e-4)
    ts, td = [], []
    for _ in range(opts.repeat):
        ts.append(per_call(static, (x,), opts.calls))
        td.append(per_call(dyn, (x,), opts.calls))
    ms, md = statistics.median(ts), statistics.median(td)
    print(f"{'torch encoder':16s} {ms * 1e3:8.2f}ms {md * 1e3:8.2f}ms {md / ms:6.2f}", end="")
    before = jc.cache_info()["compiles"]
    with torch.no_grad():
        for n in [2, 3, 4, 5, 6, 7, 9, 12, 16, 8]:
            xb = torch.randn(n, S, D)
            torch.testing.assert_close(dyn(xb), layer(xb), rtol=1e-4, atol=1e-4)
        batches = jc.cache_info()["compiles"] - before
        for t in [32, 64, 96, 128]:
            xb = torch.randn(3, t, D)
            torch.testing.assert_close(dyn(xb), layer(xb), rtol=1e-4, atol=1e-4)
    seqs = jc.cache_info()["compiles"] - before - batches
    print(f"  {batches:17d}  exports: {len(dyn._programs)} for 10 batch sizes and 4 sequence"
          f" lengths; compiles for the 4 lengths: {seqs}")


def per_call(f, args, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        f(*args)
    return (time.perf_counter() - t0) / calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--only", default="")
    opts = ap.parse_args()
    jc.set_num_threads(1)
    only = set(filter(None, opts.only.split(",")))
    print(f"{'graph':16s} {'static':>10s} {'dynamic':>10s} {'ratio':>6s}  "
          f"{'compiles/10 sizes':>17s}  dynamic?")
    for name, (fn, args, at) in cases().items():
        if only and name not in only:
            continue
        static, dyn = jc.jit(fn), jc.jit(fn, dynamic=True)
        before = jc.cache_info()["compiles"]
        lead = args[0].shape[0]
        sizes = [args] + [at(max(2, lead * k // 10 + k)) for k in range(1, 10)]
        results = [dyn(*a) for a in sizes]        # the suite's size and 9 others
        count = jc.cache_info()["compiles"] - before
        for a, r in zip(sizes, results):
            np.testing.assert_allclose(r, static(*a), rtol=1e-3, atol=1e-3)
        ts, td = [], []
        for _ in range(opts.repeat):          # interleaved: the machine's load hits both
            ts.append(per_call(static, args, opts.calls))
            td.append(per_call(dyn, args, opts.calls))
        ms, md = statistics.median(ts), statistics.median(td)
        first = dyn.explain(*args).splitlines()[0]
        why = "yes" if first.startswith("shapes: run-time") else first.split(": ", 2)[-1][:60]
        unit, scale = ("us", 1e6) if ms < 1e-3 else ("ms", 1e3)
        print(f"{name:16s} {ms * scale:8.2f}{unit} {md * scale:8.2f}{unit} {md / ms:6.2f}"
              f"  {count:17d}  {why}")
    if not only or "seq" in only:
        sequence_sweep(opts)
    if not only or "torch" in only:
        torch_encoder(opts)


if __name__ == "__main__":
    main()
