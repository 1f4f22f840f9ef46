"""examples/dask_blocks.py, small: a LocalCluster of two worker processes runs a jitted
function over array blocks (map_blocks) and a dataframe column (map_partitions); the results
equal numpy's on the same cluster within the example's stated tolerance."""
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("dask")
pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dask_blocks.py"


def load_example():
    spec = importlib.util.spec_from_file_location("dask_blocks", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cluster_results_equal_numpy():
    example = load_example()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        report = example.run(size=512, chunk=256, rows=40_000)
        workers_used = client.run(lambda: True)
    assert len(workers_used) == 2
    assert report["blocks_excess"] <= 0 and report["column_excess"] <= 0
    assert all(report[k] > 0 for k in ("blocks_jitcore_s", "column_jitcore_s"))
