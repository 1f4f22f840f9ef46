"""The runtime's one LLVM IR module: the intra-op pool (`pool_ir`) with the inter-op task
queue (`tasks_ir`) added to it; compiled once per process and linked into every graph."""
from __future__ import annotations

from .pool_ir import PoolModule
from .tasks_ir import add_tasks


def build_pool_module(triple: str, data_layout: str) -> str:
    """The runtime's LLVM IR module (text)."""
    pool = PoolModule()
    pool.m.triple, pool.m.data_layout = triple, data_layout
    run_chunks = pool.run_chunks()
    worker = pool.worker(run_chunks)
    pool.parallel_for(run_chunks, worker)
    pool.small_exports(add_tasks(pool))
    return str(pool.m)
