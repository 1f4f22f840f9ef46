"""ONNX Runtime and OpenVINO on the CNN layer rows (convs, pools, conv + batch norm + relu,
the residual block): the whole-model runtimes, one layer at a time.

Each row's torch function (peers_torch.EAGER) with its weights as parameters
(peers_torch.WeightsModule) is exported once: to ONNX (torch.onnx.export, dynamo) for an
ONNX Runtime session (CPU provider, ORT_ENABLE_ALL, intra-op threads = the cell's, inter-op
1), and through `ov.convert_model` for OpenVINO ("CPU", INFERENCE_NUM_THREADS = the cell's,
f32 precision, the latency hint, one stream, an infer request reused). Both fold the
constant weights at load (prepacked as jitcore's constants= are). A call takes the numpy
input and returns a fresh output; neither writes into a given array, so compute only is n/a.
Each converts NCHW to its own blocked layout at the edges of the one-layer graph, a cost a
whole model pays once, not per layer: the model rows (`--models`) are their fair measure.
Imported only in these systems' children.
"""
from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np

CNN_ROWS = ("conv3x3_64", "conv1x1_64_256", "conv3x3_256", "conv7x7s2_stem", "dwconv3x3_96",
            "conv_bn_relu", "resblock", "max_pool_3x3s2", "avg_pool_2x2", "global_avg_pool",
            "global_avg_pool_b8")


# how every bench (these rows and the model suite) runs the two runtimes, set explicitly and
# recorded in each result's stamp
ORT_SETTINGS = {"graph_optimization_level": "ORT_ENABLE_ALL", "inter_op_num_threads": 1,
                "intra_op_num_threads": "the cell's threads",
                "providers": ["CPUExecutionProvider"]}
OPENVINO_SETTINGS = {"device": "CPU", "INFERENCE_PRECISION_HINT": "f32",
                     "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
                     "INFERENCE_NUM_THREADS": "the cell's threads"}
# the model suite's bf16 systems (openvino-bf16, onnxruntime-bf16): the same, but for these
OPENVINO_BF16_SETTINGS = {**OPENVINO_SETTINGS, "INFERENCE_PRECISION_HINT": "bf16"}
# ONNX Runtime's CPU provider has bf16 GEMM kernels on Arm64 only (MLAS's fastmath mode);
# on x86-64 it has none, and onnxruntime-bf16 is n/a there
ORT_BF16_CONFIG = {"mlas.enable_gemm_fastmath_arm64_bfloat16": "1"}
ORT_BF16_MACHINES = ("aarch64", "arm64")


def ort_session(path: str, threads: int, config: dict | None = None):
    """An ONNX Runtime session of the model at `path` with ORT_SETTINGS at `threads`, and
    the session `config` entries given (ORT_BF16_CONFIG)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    for key, value in (config or {}).items():
        opts.add_session_config_entry(key, value)
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = ORT_SETTINGS["inter_op_num_threads"]
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                            ORT_SETTINGS["graph_optimization_level"])
    return ort.InferenceSession(path, opts, providers=ORT_SETTINGS["providers"])


def openvino_compiled(core, model, threads: int, settings: dict = OPENVINO_SETTINGS):
    """`model` compiled by OpenVINO with `settings` (OPENVINO_SETTINGS or
    OPENVINO_BF16_SETTINGS) at `threads`."""
    config = {k: v for k, v in settings.items() if k != "device"}
    config["INFERENCE_NUM_THREADS"] = threads
    return core.compile_model(model, settings["device"], config)


def _module(name: str, args: tuple):
    """(torch module of the row with its weights as parameters, its torch input)."""
    import torch

    from . import peers_torch
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in args]
    return peers_torch.WeightsModule(peers_torch.EAGER[name], tensors[1:]).eval(), tensors[0]


def setup(threads: int):
    import torch
    torch.set_num_threads(1)             # (export only: the runtimes have pools of their own)


def onnxruntime_calls(threads: int):
    import torch
    setup(threads)

    def calls(name, args, out):
        if name not in CNN_ROWS:
            return None
        module, x = _module(name, args)
        path = os.path.join(tempfile.mkdtemp(prefix="jc-onnx-"), f"{name}.onnx")
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (x,), path, dynamo=True)
        sess = ort_session(path, threads)
        feeds = {sess.get_inputs()[0].name: np.ascontiguousarray(args[0])}
        return (lambda: sess.run(None, feeds)[0]), None
    return calls


def openvino_calls(threads: int):
    import openvino as ov
    import torch
    setup(threads)
    core = ov.Core()

    def calls(name, args, out):
        if name not in CNN_ROWS:
            return None
        module, x = _module(name, args)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            model = ov.convert_model(module, example_input=(x,))
        request = openvino_compiled(core, model, threads).create_infer_request()
        feed = {0: np.ascontiguousarray(args[0])}
        return (lambda: request.infer(feed, share_inputs=True)[0]), None
    return calls
