"""The pass pipeline as one straight-line function of named stages, verifying between them."""
from __future__ import annotations

from jitcore.ir.graph import Graph
from jitcore.ir.verifier import verify as verify_graph

from .absorb_padding import absorb_padding
from .decompose import decompose
from .dynamic import check_graph, check_lowered
from .fold_batch_norm import fold_batch_norm
from .fuse_outputs import fuse_outputs
from .fuse_rows import fuse_rows
from .kernel import verify_kinds
from .legality import check
from .lower import LoweredGraph, lower
from .pixel_convs import pixel_convs_as_matmuls
from .simplify import simplify
from .sink_concat import sink_into_concat
from .split_reductions import split_reductions
from .subsample_convs import subsample_strided_convs
from .tasks import schedule
from .widen_bf16 import widen_bf16


def run_pipeline(graph: Graph, vector_bits: int, input_strides: dict | None = None,
                 masked_tails: bool = False, verify_stages: bool = True,
                 dynamic: bool = False) -> LoweredGraph:
    """Graph -> primitive graph -> kernels with vectorization decisions. `verify_stages`:
    check the graph's typing before and after each graph pass (a third of the Python pass
    time of a long chain, so the compile driver leaves it to JITCORE_VERIFY=1). `dynamic`:
    the graph's shapes hold run-time extents (symbolic.dynamic_extent); raises
    dynamic.NotDynamic when the graph needs the value of one."""
    verify = verify_graph if verify_stages else _unchecked
    # stages: bfloat16 computed as float32 (stored as bfloat16), zero paddings read by
    # convs into the convs, fold batch norms into constant convs and matmuls, widening
    # 1x1 convs of one pixel as matmuls, strided 1x1 convs over a subsampled copy, decompose
    # composites,
    # simplify (CSE, folding), move elementwise ops into the concatenations they read, split
    # big full reductions into
    # fixed blocks, lower to loop nests, decide vectorization per kernel, merge pointwise
    # kernels that share a loop nest, fuse kernels that share rows, order the kernels and
    # forked tasks
    graph = verify(graph)
    graph = verify(widen_bf16(graph))
    graph = verify(absorb_padding(graph))
    graph = verify(fold_batch_norm(graph))
    graph = verify(pixel_convs_as_matmuls(graph))
    graph = verify(subsample_strided_convs(graph))
    graph = verify(decompose(graph))
    graph = verify(simplify(graph))
    sunk = sink_into_concat(graph)
    graph = verify(simplify(sunk)) if sunk is not graph else graph   # (folds constant regions)
    graph = verify(split_reductions(graph, input_strides))
    if dynamic:
        check_graph(graph)
    lowered = lower(graph, input_strides)
    for kernel in lowered.kernels:
        check(kernel, vector_bits, masked_tails)
    lowered.kernels = fuse_outputs(lowered.kernels, vector_bits, masked_tails)
    lowered.kernels = verify_kinds(fuse_rows(lowered.kernels))
    lowered.steps = schedule(lowered.kernels)
    if dynamic:
        check_lowered(lowered)
    return lowered


def _unchecked(graph: Graph) -> Graph:
    return graph
