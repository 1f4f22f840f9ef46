"""`python -m jitcore bench --generate`: a LLaMA-style decoder (jitcore/bench/decoder.py)
generating greedily with a KV cache, tokens per second per system.

    python -m jitcore bench --generate [--threads 1,2] [--tokens 128] [--prompt 32]
                                       [--hidden 1024] [--rounds 5] [--systems jitcore,torch,torch.compile,onnxruntime]
                                       [--json PATH] [--tiny]

Every system runs the same two modules (prefill, decode step) and the same loop, which owns
the preallocated time-major cache and writes each step's new rows into it:
- jitcore: `jitcore.torch.compile(..., dynamic=True)` of each, one compile for every
  prompt length and every cache length;
- torch: eager, under inference_mode;
- torch.compile: Inductor (freezing on, dynamic=True), default mode;
- onnxruntime: each module exported with torch.onnx.export (dynamo) with the prompt length
  and the cache length as dynamic axes (the past k/v are inputs, the new rows outputs), a
  session with the bench's ORT settings (peers_runtimes.ORT_SETTINGS).
All in one process, interleaved: each round runs every system once (128 tokens by default),
the order rotated per round; the tables give medians over rounds of the prefill time and
the decode tokens per second (wall, and per CPU second of the process: the fairer figure on
a shared machine), each system's first call (compile + a short generation; at the first
thread count only, except ONNX Runtime's sessions, built per count), and whether its tokens
equal eager's. A system that fails is recorded with its error. The JSON carries the
stamp (jitcore/bench/stamp.py).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

from .stamp import caption, stamp

SYSTEMS = ("jitcore", "torch", "torch.compile", "onnxruntime")


# ---- each system's (prefill, step) -------------------------------------------------------------
def _jitcore(pre, step, prompt, past, threads):
    import torch
    import jitcore.torch as jt
    cpre = jt.compile(pre, prompt, dynamic=True)
    cstep = jt.compile(step, prompt[:, :1], torch.tensor([[prompt.shape[1]]]), *past,
                       dynamic=True)
    return cpre, cstep


def _torch(pre, step, prompt, past, threads):
    return pre, step


def _torch_compile(pre, step, prompt, past, threads):
    import torch
    torch._inductor.config.freezing = True
    return torch.compile(pre, dynamic=True), torch.compile(step, dynamic=True)


def _onnx_export(module, args, dynamic_shapes, path):
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, dynamo=True, dynamic_shapes=dynamic_shapes,
                          external_data=True)


def _onnxruntime(pre, step, prompt, past, threads):
    import torch
    from torch.export import Dim

    from .peers_runtimes import ort_session
    root = tempfile.mkdtemp(prefix="jc-generate-onnx-")
    P, T = Dim("P", min=2, max=4096), Dim("T", min=2, max=4096)
    _onnx_export(pre, (prompt,), ({1: P},), os.path.join(root, "prefill.onnx"))
    _onnx_export(step, (prompt[:, :1], torch.tensor([[prompt.shape[1]]]), *past),
                 (None, None, tuple({0: T} for _ in past)), os.path.join(root, "step.onnx"))
    sessions = [ort_session(os.path.join(root, f), threads)
                for f in ("prefill.onnx", "step.onnx")]

    def runner(sess):
        names = [i.name for i in sess.get_inputs()]

        def run(*tensors):
            out = sess.run(None, {n: t.numpy() for n, t in zip(names, tensors)})
            return [torch.from_numpy(o) for o in out]
        return run
    return runner(sessions[0]), runner(sessions[1])


BUILD = {"jitcore": _jitcore, "torch": _torch, "torch.compile": _torch_compile,
         "onnxruntime": _onnxruntime}


# ---- the run ------------------------------------------------------------------------------------
def _set_threads(threads: int) -> None:
    import torch
    import jitcore as jc
    torch.set_num_threads(threads)
    jc.set_num_threads(threads)


def run(opts) -> dict:
    import torch
    from . import decoder
    config = dict(decoder.TINY if opts.tiny else decoder.llama_shape(opts.hidden))
    config["max_position_embeddings"] = max(config["max_position_embeddings"],
                                            opts.prompt + opts.tokens)
    lm = decoder.build(config)
    pre, step = decoder.Prefill(lm).eval(), decoder.Step(lm).eval()
    prompt = torch.randint(0, config["vocab_size"], (1, opts.prompt),
                           generator=torch.Generator().manual_seed(1))
    cache = decoder.KVCache.empty(lm, opts.prompt + opts.tokens)
    cache.length = opts.prompt
    past = [t.clone() for t in cache.prefix()]       # example prefixes (export traces them)
    results, built = {}, {}
    for threads in opts.threads_list:
        _set_threads(threads)
        cells, systems = {}, {}
        eager = decoder.generate(pre, step, lm, prompt, opts.tokens, cache=cache).tokens
        for name in opts.systems_list:
            # a session has its thread count; jitcore's and torch's code follows the setting
            key = (name, threads if name == "onnxruntime" else None)
            t0 = time.perf_counter()
            try:
                if key not in built:
                    with torch.inference_mode():
                        built[key] = BUILD[name](pre, step, prompt, past, threads)
                    decoder.generate(*built[key], lm, prompt, 8, cache=cache)
                    first = time.perf_counter() - t0
                else:
                    first = None                       # built at an earlier thread count
            except Exception as e:                     # a peer's failure is a result
                cells[name] = {"status": f"failed: {type(e).__name__}: {e}"[:400]}
                print(f"  {name}, {threads} thread(s): {cells[name]['status']}", flush=True)
                continue
            cells[name] = {"status": "ok", "first_call_s": first, "prefill_s": [],
                           "decode_s": [], "prefill_cpu_s": [], "decode_cpu_s": []}
            systems[name] = built[key]
        for r in range(opts.rounds):
            order = list(systems)
            order = order[r % len(order):] + order[:r % len(order)]
            for name in order:
                g = decoder.generate(*systems[name], lm, prompt, opts.tokens, cache=cache)
                c = cells[name]
                c["prefill_s"].append(g.prefill_s)
                c["decode_s"].append(g.decode_s)
                c["prefill_cpu_s"].append(g.prefill_cpu)
                c["decode_cpu_s"].append(g.decode_cpu)
                c["tokens_match_eager"] = g.tokens == eager
            print(f"  {threads} thread(s): round {r + 1}/{opts.rounds}", flush=True)
        for c in cells.values():
            if c["status"] == "ok":
                _summarize(c, opts.tokens - 1)
        results[str(threads)] = cells
    return {"config": config, "prompt": opts.prompt, "tokens": opts.tokens,
            "rounds": opts.rounds, "results": results}


def _summarize(cell: dict, steps: int) -> None:
    """Medians over rounds: prefill ms, decode tokens per wall second and per CPU second."""
    cell["prefill_ms"] = 1e3 * statistics.median(cell["prefill_s"])
    cell["tokens_per_s"] = steps / statistics.median(cell["decode_s"])
    cell["tokens_per_cpu_s"] = steps / statistics.median(cell["decode_cpu_s"])


def best_peer_ratio(cells: dict, key: str):
    """jitcore's figure over the best peer's (eager included), and that peer; None if
    jitcore or every peer failed."""
    ok = {n: c[key] for n, c in cells.items() if c["status"] == "ok"}
    if "jitcore" not in ok or len(ok) < 2:
        return None, None
    peer = max((n for n in ok if n != "jitcore"), key=ok.get)
    return ok["jitcore"] / ok[peer], peer


def _seconds(value) -> str:
    return "(built above)" if value is None else f"{value:.1f}"


def tables(data: dict) -> str:
    cfg = data["config"]
    lines = [caption(data),
             f"LLaMA (LlamaConfig: hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} "
             f"layers, {cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} kv "
             f"heads, intermediate {cfg['intermediate_size']}, vocab {cfg['vocab_size']}), "
             f"batch 1, prompt {data['prompt']}, {data['tokens']} tokens greedy, medians of "
             f"{data['rounds']} interleaved rounds"]
    for threads, cells in data["results"].items():
        lines += ["", f"{threads} thread(s)",
                  "| system | prefill ms | decode tokens/s | tokens per CPU s | vs eager "
                  "(CPU) | first call s | tokens = eager |",
                  "|---|---|---|---|---|---|---|"]
        base = cells.get("torch", {})
        for name, c in cells.items():
            if c["status"] != "ok":
                lines.append(f"| {name} | {c['status']} | | | | | |")
                continue
            vs = (f"{c['tokens_per_cpu_s'] / base['tokens_per_cpu_s']:.2f}x"
                  if base.get("status") == "ok" else "-")
            lines.append(f"| {name} | {c['prefill_ms']:.1f} | {c['tokens_per_s']:.1f} | "
                         f"{c['tokens_per_cpu_s']:.1f} | {vs} | {_seconds(c['first_call_s'])} | "
                         f"{'yes' if c.get('tokens_match_eager') else 'NO'} |")
        for key, what in (("tokens_per_s", "wall"), ("tokens_per_cpu_s", "CPU time")):
            ratio, peer = best_peer_ratio(cells, key)
            if ratio is not None:
                lines.append(f"jitcore / best peer ({peer}), {what}: {ratio:.2f}x")
    return "\n".join(lines)


def decoder_hidden() -> int:
    from .decoder import CONFIG
    return CONFIG["hidden_size"]


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m jitcore bench --generate",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated systems")
    ap.add_argument("--threads", default="1", help="comma-separated thread counts")
    ap.add_argument("--tokens", type=int, default=128, help="tokens to generate")
    ap.add_argument("--prompt", type=int, default=32, help="prompt length")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--json", help="write the results to this JSON file")
    ap.add_argument("--hidden", type=int, default=decoder_hidden(),
                    help="the model's width (LLaMA's proportions: decoder.llama_shape)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model (the test suite's)")
    opts = ap.parse_args(argv)
    opts.systems_list = opts.systems.split(",")
    unknown = [s for s in opts.systems_list if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown systems: {', '.join(unknown)}; systems: {', '.join(SYSTEMS)}")
    try:
        opts.threads_list = [int(t) for t in opts.threads.split(",")]
    except ValueError:
        ap.error("--threads takes comma-separated integers, e.g. 1,2")
    if opts.prompt < 2 or opts.tokens < 2 or opts.rounds < 1:
        ap.error("--prompt and --tokens must be at least 2, --rounds at least 1")
    return opts


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    opts = parse(argv)
    data = run(opts)
    from .peers_runtimes import ORT_SETTINGS
    data["stamp"] = stamp({"command": "python -m jitcore bench --generate " + " ".join(argv),
                           "systems": opts.systems_list, "threads": opts.threads_list,
                           "torch.compile": {"dynamic": True, "freezing": True,
                                             "mode": "default"},
                           "onnxruntime": ORT_SETTINGS})
    print(tables(data))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(data, f, indent=1)
        print(f"results written to {opts.json}")
    jit = [c for cells in data["results"].values() for n, c in cells.items() if n == "jitcore"]
    return 0 if all(c["status"] == "ok" and c.get("tokens_match_eager") for c in jit) else 1
