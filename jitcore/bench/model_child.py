"""One system at one thread count and batch running the model benchmark, in its own process:
`python -m jitcore.bench.model_child --system S --threads N --models a,b [--batch B]`.

Started by jitcore.bench.model_suite pinned to N cores with every library's thread variables
set (as the kernel suite's children). Per model: eager torch's output is the reference (this
process computes it); the first call (compile + first run) is timed, its output checked
(normwise relative error against eager), then calls are timed. Prints one JSON line per model
(progress) and a final JSON report.

How each system runs a model: jitcore `jitcore.torch.compile(module, *inputs)`; torch eager
under one inference_mode; torch.compile with Inductor's freezing, in its default mode and
(torch.compile-max-autotune) with mode="max-autotune"; ONNX Runtime on the
dynamo-exported ONNX file, CPU provider, `intra_op_num_threads` N, one inter-op thread and
the graph optimization level set explicitly to ORT_ENABLE_ALL (its default today: every
fusion and layout transform it has); OpenVINO on `ov.convert_model(module, example_input=...)`
compiled for "CPU" with INFERENCE_NUM_THREADS N, fp32 (INFERENCE_PRECISION_HINT "f32": no
bf16 on cores that have it), PERFORMANCE_HINT "LATENCY" and one stream, timed through one
infer request (the inputs shared, the output copied out as ONNX Runtime's is).

The bf16 systems: jitcore-bf16 `jitcore.torch.compile(module, *inputs, precision="bf16")`;
torch-autocast eager under `torch.autocast("cpu", dtype=torch.bfloat16)` (entered per call),
torch.compile-autocast compiled as torch.compile and called under autocast; openvino-bf16
with INFERENCE_PRECISION_HINT "bf16"; onnxruntime-bf16 with MLAS's bf16 fastmath GEMMs,
which exist on Arm64 only (elsewhere the cell is n/a). Their outputs are checked against the
float64 eager output (a bf16 cell is 'wrong' above BF16_TOLERANCE); every cell of the suite
also reports its error against float64 (rel_error_f64), so accuracy shows beside speed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
import warnings

from .child import time_calls
from .peers_runtimes import (OPENVINO_BF16_SETTINGS, ORT_BF16_CONFIG, ORT_BF16_MACHINES,
                             openvino_compiled, ort_session)

warnings.filterwarnings("ignore")
FP32_SYSTEMS = ("jitcore", "torch", "torch.compile", "torch.compile-max-autotune",
                "onnxruntime", "openvino")
BF16_SYSTEMS = ("jitcore-bf16", "torch-autocast", "torch.compile-autocast",
                "onnxruntime-bf16", "openvino-bf16")
SYSTEMS = FP32_SYSTEMS + BF16_SYSTEMS
SYSTEM_MODULES = {"jitcore": "torch", "torch": "torch", "torch.compile": "torch",
                  "torch.compile-max-autotune": "torch", "onnxruntime": "onnxruntime",
                  "openvino": "openvino", "jitcore-bf16": "torch", "torch-autocast": "torch",
                  "torch.compile-autocast": "torch", "onnxruntime-bf16": "onnxruntime",
                  "openvino-bf16": "openvino"}
FP32_TOLERANCE = 1e-4    # normwise, against float32 eager
# normwise, against float64 eager: bf16's unit roundoff is 2^-8 (3.9e-3); whole models
# through dozens of rounded matmuls land at 1e-3..2e-2 (torch autocast's own, tiny models)
BF16_TOLERANCE = 5e-2


class NotAvailable(Exception):
    """The system has no such kernels on this machine: the cell is n/a, not failed."""


def rel_error(got, want) -> float:
    import torch
    got = torch.as_tensor(got).double()
    want = want.double()
    return float((got - want).norm() / max(float(want.norm()), 1e-30))


def _jitcore(module, inputs, threads, precision=None):
    import jitcore as jc
    import jitcore.torch as jt
    jc.set_num_threads(threads)
    m = jt.compile(module, *inputs, precision=precision)
    info = {"fallbacks": len(m.fallbacks), "fallback_ops": sorted({f[1] for f in m.fallbacks}),
            "fallback_reasons": sorted({f"{op}: {why}" for _, op, why in m.fallbacks}),
            "parts": len(m._program.parts)}
    return (lambda: m(*inputs)), info


def _torch(module, inputs, threads):
    return (lambda: module(*inputs)), {}


def _torch_compile(module, inputs, threads, mode: str = "default"):
    import torch
    torch._inductor.config.freezing = True
    m = torch.compile(module, mode=mode)
    return (lambda: m(*inputs)), {}


def _torch_compile_max_autotune(module, inputs, threads):
    return _torch_compile(module, inputs, threads, mode="max-autotune")


def _onnxruntime(module, inputs, threads, config=None):
    import torch
    path = os.path.join(tempfile.mkdtemp(prefix="jc-onnx-"), "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(inputs), path, dynamo=True, external_data=True)
    sess = ort_session(path, threads, config)
    feeds = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)}
    return (lambda: sess.run(None, feeds)[0]), {}


def _openvino(module, inputs, threads, *settings):
    import openvino as ov
    model = ov.convert_model(module, example_input=tuple(inputs))
    request = openvino_compiled(ov.Core(), model, threads, *settings).create_infer_request()
    feeds = {i: x.numpy() for i, x in enumerate(inputs)}
    return (lambda: request.infer(feeds, share_inputs=True)[0]), {}


def _autocast(call):
    """`call` run under CPU autocast to bf16 (entered per call: the float64 reference and the
    other systems of the process stay outside it)."""
    import torch

    def run():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return call()
    return run


def _torch_autocast(module, inputs, threads):
    return _autocast(lambda: module(*inputs)), {}


def _torch_compile_autocast(module, inputs, threads):
    call, info = _torch_compile(module, inputs, threads)
    return _autocast(call), info


def _onnxruntime_bf16(module, inputs, threads):
    if platform.machine().lower() not in ORT_BF16_MACHINES:
        raise NotAvailable(f"ONNX Runtime's CPU provider has no bf16 GEMM kernels on "
                           f"{platform.machine()} (its bf16 fastmath mode is Arm64's)")
    return _onnxruntime(module, inputs, threads, ORT_BF16_CONFIG)


BUILD = {"jitcore": _jitcore, "torch": _torch, "torch.compile": _torch_compile,
         "torch.compile-max-autotune": _torch_compile_max_autotune,
         "onnxruntime": _onnxruntime, "openvino": _openvino,
         "jitcore-bf16": lambda *a: _jitcore(*a, precision="bf16"),
         "torch-autocast": _torch_autocast, "torch.compile-autocast": _torch_compile_autocast,
         "onnxruntime-bf16": _onnxruntime_bf16,
         "openvino-bf16": lambda *a: _openvino(*a, OPENVINO_BF16_SETTINGS)}


def setup(system: str, threads: int):
    """Pools sized, one inference_mode for the whole process, one-time setup (export,
    dynamo, the ONNX exporter) taken out of the first model's compile with a tiny module."""
    import torch
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    torch.inference_mode().__enter__()
    tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    try:
        call, _ = BUILD[system](tiny, (x,), threads)
    except NotAvailable:                         # (each model's cell says so)
        return
    call()


def reference_f64(name: str, module, inputs: tuple, batch: int, data_dir: str | None):
    """The model's float64 eager output: computed by the first child that needs it and kept
    in `data_dir` for the other systems' children (computed here when there is none)."""
    import torch
    from .zoo import reference
    if data_dir is None:
        return reference(module, inputs)
    path = os.path.join(data_dir, f"{name}-b{batch}-f64.pt")
    if not os.path.exists(path):
        torch.save(reference(module, inputs), path + ".part")
        os.replace(path + ".part", path)
    return torch.load(path)


def zoo_model(name: str, tiny: bool, layers: int | None, data_dir: str):
    """A zoo model (jitcore/bench/zoo.py), its inputs and its float64 eager output: computed
    by the first child that builds it, saved in `data_dir` for the other systems' children."""
    import torch
    from . import zoo
    module, inputs = zoo.build(name, layers, tiny)
    path = os.path.join(data_dir, f"{name}.pt")
    if not os.path.exists(path):
        torch.save(zoo.reference(module, inputs), path)
    return module, inputs, torch.load(path)


def run_model(system: str, name: str, threads: int, tiny: bool, repeat: int,
              first_only: bool, batch: int = 1, zoo: dict | None = None,
              ref_dir: str | None = None) -> dict:
    """One model's cell: the `--models` suite's model at `batch` checked against float32
    eager (a bf16 system: against float64 eager, whose error every cell also reports; its
    output kept in `ref_dir`) or, with `zoo` ({"layers": n or None, "data_dir": path}), a
    zoo model checked against float64 eager."""
    import torch
    from .models import build
    want64 = None
    try:
        if zoo is None:
            module, inputs = build(name, tiny, batch)
            want = module(*inputs)
            want64 = reference_f64(name, module, inputs, batch, ref_dir)
        else:
            module, inputs, want = zoo_model(name, tiny, zoo["layers"], zoo["data_dir"])
        t0 = time.perf_counter()
        call, info = BUILD[system](module, inputs, threads)
        got = call()
        first = time.perf_counter() - t0
        shape = tuple(torch.as_tensor(got).shape)
        if shape != tuple(want.shape):           # (an empty output would have no error)
            return {"status": "wrong", "first_call_s": first,
                    "error": f"output shape {shape}, eager's {tuple(want.shape)}"}
        err = rel_error(got, want)
    except NotAvailable as e:
        return {"status": "n/a", "error": str(e)}
    except Exception as e:                       # a system that fails is reported
        return {"status": "failed", "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                "trace": traceback.format_exc(limit=4)[-1000:]}
    cell = {"status": "ok" if err <= FP32_TOLERANCE else "wrong", "first_call_s": first,
            "rel_error": err, **info}
    if want64 is not None:
        cell["rel_error_f64"] = rel_error(got, want64)
        if system in BF16_SYSTEMS:
            cell["status"] = "ok" if cell["rel_error_f64"] <= BF16_TOLERANCE else "wrong"
    if first_only:
        return cell
    cell.update(time_calls(call, repeat, budget_s=3.0))
    del torch
    return cell


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jitcore.bench.model_child")
    ap.add_argument("--system", required=True, choices=SYSTEMS)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--first-calls-only", action="store_true")
    ap.add_argument("--zoo", metavar="DATA_DIR",
                    help="the models are the zoo's (jitcore/bench/zoo.py), their float64 "
                         "references kept in DATA_DIR; no disk cache: first calls are cold")
    ap.add_argument("--layers", type=int, default=2, help="zoo depth (0: the real depth)")
    ap.add_argument("--ref-dir", help="where the float64 eager outputs are kept between "
                                      "children (default: computed in each)")
    opts = ap.parse_args(argv)
    zoo = None
    if opts.zoo:
        os.environ["JITCORE_DISK_CACHE"] = "0"       # read at each compile
        zoo = {"layers": opts.layers or None, "data_dir": opts.zoo}
    setup(opts.system, opts.threads)
    results = {}
    for name in opts.models.split(","):
        results[name] = run_model(opts.system, name, opts.threads, opts.tiny, opts.repeat,
                                  opts.first_calls_only, opts.batch, zoo, opts.ref_dir)
        print(json.dumps({"progress": name}), flush=True)
    print(json.dumps({"system": opts.system, "threads": opts.threads, "batch": opts.batch,
                      "results": results}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
