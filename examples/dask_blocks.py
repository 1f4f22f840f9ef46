"""A jitted function on a Dask cluster: `map_blocks` over an 8192 x 8192 float32 array and
`map_partitions` over a dataframe column, each checked against numpy run on the same cluster
(the same blocks, the same workers), with both times printed.

Each worker process receives the jitted function pickled (its Python function and options,
no machine code) and compiles it on its first block, or loads the code from the disk cache.

    python examples/dask_blocks.py [--size 8192] [--chunk 2048] [--workers 2]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import jitcore as jc

RTOL, ATOL = 1e-5, 1e-6          # float32 transcendentals: a few ulp from numpy's


@jc.jit
def damped_wave(x):
    return jc.exp(-0.5 * x * x) * jc.sin(3.0 * x) + 0.25 * x


def damped_wave_numpy(x):
    return np.exp(-0.5 * x * x) * np.sin(3.0 * x) + np.float32(0.25) * x


def column_series(fn):
    """A map_partitions function: fn over a column's values, as a Series of the same index.
    (`run` only tells Dask's keys of the cold and the warm run apart.)"""
    def apply(column, run):
        import pandas as pd
        return pd.Series(fn(column.to_numpy()), index=column.index, name=column.name)
    return apply


def cold_and_warm(label: str, make):
    """Persist make(run) on the cluster twice, as distinct keys: the first run includes each
    worker's one-time work (jitcore: compiling); print both times and return the warm
    result and its seconds."""
    from distributed import wait
    seconds = []
    for run in ("cold", "warm"):
        t0 = time.perf_counter()
        result = make(run).persist()
        wait(result)
        seconds.append(time.perf_counter() - t0)
    print(f"  {label:8s} cold {seconds[0]:7.3f} s   warm {seconds[1]:7.3f} s")
    return result, seconds[1]


def max_excess(got, want):
    """max(|got - want| - (ATOL + RTOL |want|)): <= 0 means equal within the tolerance."""
    import dask.array as da
    return float(da.max(abs(got - want) - (ATOL + RTOL * abs(want))).compute())


def run(size: int, chunk: int, rows: int) -> dict:
    """The two workloads on the current Dask client, jitcore and numpy each, cold and warm;
    returns the warm seconds and the largest excess over the tolerance per workload."""
    import dask.array as da
    from distributed import wait
    rng = da.random.default_rng(0)
    x = rng.standard_normal((size, size), chunks=(chunk, chunk), dtype=np.float32).persist()
    column = rng.standard_normal(rows, chunks=rows // 8, dtype=np.float32)
    df = column.to_dask_dataframe(columns="x").to_frame().persist()
    wait([x, df])                        # the inputs exist on the workers before any timing
    report = {}

    print(f"map_blocks over {size} x {size} float32 ({x.npartitions} blocks):")
    got, report["blocks_jitcore_s"] = cold_and_warm("jitcore", lambda run: x.map_blocks(
        damped_wave, dtype=np.float32, name=f"damped-wave-jitcore-{run}"))
    want, report["blocks_numpy_s"] = cold_and_warm("numpy", lambda run: x.map_blocks(
        damped_wave_numpy, dtype=np.float32, name=f"damped-wave-numpy-{run}"))
    report["blocks_excess"] = max_excess(got, want)

    print(f"map_partitions over a {rows}-row float32 column ({df.npartitions} partitions):")
    meta = ("x", np.float32)
    got, report["column_jitcore_s"] = cold_and_warm("jitcore", lambda run: df[
        "x"].map_partitions(column_series(damped_wave), run, meta=meta))
    want, report["column_numpy_s"] = cold_and_warm("numpy", lambda run: df[
        "x"].map_partitions(column_series(damped_wave_numpy), run, meta=meta))
    report["column_excess"] = max_excess(got.to_dask_array(lengths=True),
                                         want.to_dask_array(lengths=True))
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--rows", type=int, default=1 << 24)
    p.add_argument("--workers", type=int, default=2)
    opts = p.parse_args()

    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=opts.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        threads = client.run(jc.get_num_threads)
        print(f"{opts.workers} worker processes, 1 Dask thread each; jitcore threads per "
              f"worker: {sorted(set(threads.values()))}")
        report = run(opts.size, opts.chunk, opts.rows)
    for name in ("blocks", "column"):
        ok = report[f"{name}_excess"] <= 0
        print(f"{name}: jitcore equals numpy within rtol={RTOL}, atol={ATOL}: {ok}; "
              f"numpy/jitcore time: "
              f"{report[f'{name}_numpy_s'] / report[f'{name}_jitcore_s']:.2f}x")
        if not ok:
            raise SystemExit(f"{name}: results differ beyond the tolerance")


if __name__ == "__main__":
    main()
