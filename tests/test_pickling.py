"""Pickling jitted functions: pickle (module-level functions) and cloudpickle (lambdas,
closures) carry the Python function and the options, never compiled code; the receiving
process, spawned or forked, compiles or loads from its disk cache and computes numpy's answer."""
import multiprocessing
import pickle
import sys

import numpy as np
import pytest

import jitcore as jc
from jitcore import compiler

W = np.arange(8, dtype=np.float32) - 3.0


@jc.jit(vector_width=128, num_threads=1, prepack_weights=False)
def scaled_tanh(x, y):
    return jc.tanh(x) * 2.0 + y


@jc.jit(constants={"w": W})
def weighted(x, w):
    return jc.sum(x * w, axis=-1)


def reference(name: str, x: np.ndarray):
    x64 = x.astype(np.float64)
    if name == "scaled_tanh":
        return np.tanh(x64) * 2.0 + x64
    if name == "weighted":
        return (x64 * W).sum(axis=-1)
    if name == "lambda":
        return x64 * 3.0 - 1.0
    if name == "closure":
        return np.maximum(x64, 0.5) ** 2
    raise KeyError(name)


def make_closure():
    floor = 0.5

    def clipped_square(x):
        return jc.maximum(x, floor) * jc.maximum(x, floor)
    return jc.jit(clipped_square, num_threads=2)


def functions(cloudpickle=None) -> dict:
    """name -> (jitted function, how to pickle it)."""
    out = {"scaled_tanh": (scaled_tanh, pickle.dumps), "weighted": (weighted, pickle.dumps)}
    if cloudpickle is not None:
        out["lambda"] = (jc.jit(lambda x: x * 3.0 - 1.0, vector_width=128), cloudpickle.dumps)
        out["closure"] = (make_closure(), cloudpickle.dumps)
    return out


def call_args(name: str, x: np.ndarray) -> tuple:
    return (x, x) if name == "scaled_tanh" else (x,)


def run_pickled(blob: bytes, name: str, x: np.ndarray) -> dict:
    """In a worker: unpickle, report what arrived, call it and report the cache counters."""
    fn = pickle.loads(blob)
    before = compiler.cache_info()
    plans_on_arrival = len(fn._plans)
    result = fn(*call_args(name, x))
    after = compiler.cache_info()
    return {"result": result, "options": fn._options, "plans_on_arrival": plans_on_arrival,
            "compiles": after["compiles"] - before["compiles"],
            "memory_hits": after["hits"] - before["hits"],
            "disk_hits": after["disk_hits"] - before["disk_hits"]}


def same_options(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        if k == "constants" and a[k] is not None:
            if a[k].keys() != b[k].keys() or not all(
                    np.array_equal(a[k][n], b[k][n]) and a[k][n].dtype == b[k][n].dtype
                    for n in a[k]):
                return False
        elif a[k] != b[k]:
            return False
    return True


def test_round_trip_keeps_options_and_no_code():
    x = np.linspace(-2, 2, 8 * 3, dtype=np.float32).reshape(3, 8)
    for name, (fn, dumps) in functions().items():
        blob_before = dumps(fn)
        fn(*call_args(name, x))                  # compiled here...
        blob = dumps(fn)
        assert len(blob) == len(blob_before)     # ...and none of it travels
        copy = pickle.loads(blob)
        assert type(copy) is jc.JitFunction and copy is not fn
        assert same_options(copy._options, fn._options)
        assert copy.num_threads == fn.num_threads
        assert copy.prepack_weights == fn.prepack_weights
        assert len(copy._plans) == 0
        got = copy(*call_args(name, x))
        np.testing.assert_allclose(got, reference(name, x), rtol=1e-5, atol=1e-5)
        assert got.dtype == np.float32


def test_constants_travel_as_bound():
    w = np.ones(4, np.float32)
    f = jc.jit(lambda x, w: x * w, constants={"w": w})
    w[:] = 7.0                                   # after jit: changes nothing
    cloudpickle = pytest.importorskip("cloudpickle")  # (a lambda)
    copy = pickle.loads(cloudpickle.dumps(f))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(copy(x), x)
    np.testing.assert_array_equal(copy._options["constants"]["w"], np.ones(4, np.float32))


def test_without_cloudpickle_lambdas_fail_and_module_functions_work(monkeypatch):
    from jitcore import pickling
    monkeypatch.setattr(pickling, "_cloudpickle", lambda: None)
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(jc.jit(lambda x: x + 1.0))
    copy = pickle.loads(pickle.dumps(scaled_tanh))
    assert same_options(copy._options, scaled_tanh._options)


def test_compiled_graph_functions_refuse_pickling():
    g = jc.Graph("g")
    g.output(jc.exp(g.input("x", (4,), jc.float32)))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(jc.compile(g))


@pytest.fixture(scope="module", params=["spawn", "fork"])
def pool(request):
    if request.param not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {request.param} start method here")
    with multiprocessing.get_context(request.param).Pool(1) as p:
        yield request.param, p


def test_workers_compile_or_load_and_match_numpy(pool):
    method, workers = pool
    cloudpickle = pytest.importorskip("cloudpickle")
    x = np.linspace(-3, 3, 8 * 5, dtype=np.float32).reshape(5, 8)
    for name, (fn, dumps) in functions(cloudpickle).items():
        fn(*call_args(name, x))                  # the parent compiled (and stored) it
        report = workers.apply(run_pickled, (dumps(fn), name, x))
        np.testing.assert_allclose(report["result"], reference(name, x), rtol=1e-5,
                                   atol=1e-5)
        assert report["result"].dtype == np.float32
        assert same_options(report["options"], fn._options)
        assert report["plans_on_arrival"] == 0
        if method == "spawn":      # a new process: compiled from the disk cache's object code
            assert report["compiles"] == 1 and report["disk_hits"] >= 1
        else:                      # a fork shares the parent's in-memory cache
            assert report["compiles"] + report["memory_hits"] >= 1


def test_pool_map_over_a_jitted_function(pool):
    """Pool.map pickles the jitted function itself (multiprocessing's plain pickle)."""
    _, workers = pool
    xs = [np.full((2, 8), v, np.float32) for v in (-1.0, 0.0, 2.0)]
    for x, got in zip(xs, workers.map(weighted, xs)):
        np.testing.assert_allclose(got, reference("weighted", x), rtol=1e-6)


def test_modules_registered_by_value_travel_by_value():
    """cloudpickle.register_pickle_by_value(module): the function travels as code, so a
    worker without that module can still rebuild it."""
    cloudpickle = pytest.importorskip("cloudpickle")
    by_reference = pickle.dumps(scaled_tanh)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        by_value = pickle.dumps(scaled_tanh)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert b"_from_module" in by_reference and b"_from_bytes" in by_value
    copy = pickle.loads(by_value)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    np.testing.assert_allclose(copy(x, x), reference("scaled_tanh", x), rtol=1e-5, atol=1e-6)
