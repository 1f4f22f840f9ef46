"""threadpoolctl sees jitcore's intra-op pool, limits it and restores it; registering is
lazy (no threadpoolctl import at `import jitcore`) and works in either import order."""
import os
import subprocess
import sys

import numpy as np
import pytest

import jitcore as jc

threadpoolctl = pytest.importorskip("threadpoolctl")


@pytest.fixture
def threads():
    """Run the test at 3 intra-op threads and give the setting back afterwards."""
    saved = jc.get_num_threads()
    jc.set_num_threads(3)
    yield 3
    jc.set_num_threads(saved)


def _jitcore_entries(info=None):
    return [i for i in (info or threadpoolctl.threadpool_info()) if i["internal_api"] == "jitcore"]


def test_info_lists_the_pool(threads):
    (entry,) = _jitcore_entries()
    assert entry["user_api"] == "jitcore"
    assert entry["num_threads"] == threads == jc.get_num_threads()
    assert entry["version"] == jc.__version__
    jc.set_num_threads(2)
    assert _jitcore_entries()[0]["num_threads"] == 2


@pytest.mark.parametrize("how", [{"limits": 1}, {"limits": 1, "user_api": "jitcore"},
                                 {"limits": {"jitcore": 1}}])
def test_limits_and_restores(threads, how):
    with threadpoolctl.threadpool_limits(**how):
        assert jc.get_num_threads() == 1
        assert _jitcore_entries()[0]["num_threads"] == 1
    assert jc.get_num_threads() == threads


@pytest.mark.parametrize("limit, inside", [(10_000, 256), (0, 1)])
def test_limits_out_of_range_are_clamped(threads, limit, inside):
    with threadpoolctl.threadpool_limits(limits=limit, user_api="jitcore"):
        assert jc.get_num_threads() == inside
    assert jc.get_num_threads() == threads


def test_other_apis_leave_it_alone(threads):
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        assert jc.get_num_threads() == threads
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        assert jc.get_num_threads() == threads


def test_controller_object_and_decorator(threads):
    controller = threadpoolctl.ThreadpoolController().select(internal_api="jitcore")
    assert len(controller.lib_controllers) == 1
    with controller.limit(limits=2):
        assert jc.get_num_threads() == 2
    assert jc.get_num_threads() == threads

    @threadpoolctl.threadpool_limits.wrap(limits=1, user_api="jitcore")
    def inside():
        return jc.get_num_threads()
    assert inside() == 1 and jc.get_num_threads() == threads


def test_results_under_a_limit(threads):
    """Kernels big enough to split run right at one thread and after the restore."""
    f = jc.jit(lambda a, b: jc.sum(a * b + 1.0, axis=1))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 1024)).astype(np.float32)
    b = rng.standard_normal((512, 1024)).astype(np.float32)
    want = (a.astype(np.float64) * b + 1.0).sum(axis=1)
    with threadpoolctl.threadpool_limits(limits=1):
        got = f(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert got.dtype == np.float32
    np.testing.assert_allclose(f(a, b), want, rtol=1e-4, atol=1e-3)


def _python(code: str) -> str:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True, timeout=120).stdout


@pytest.mark.parametrize("order", ["jitcore first", "threadpoolctl first"])
def test_registers_lazily_in_either_order(order):
    imports = ("import jitcore, threadpoolctl" if order == "jitcore first"
               else "import threadpoolctl, jitcore")
    out = _python(
        "import sys\n"
        "import jitcore\n" * (order == "jitcore first") +
        "print('threadpoolctl' in sys.modules)\n" * (order == "jitcore first") +
        f"{imports}\n"
        "print([i['internal_api'] for i in threadpoolctl.threadpool_info()].count('jitcore'))\n"
        "with threadpoolctl.threadpool_limits(limits=1, user_api='jitcore'):\n"
        "    print(jitcore.get_num_threads())\n")
    lines = out.split()
    if order == "jitcore first":
        assert lines.pop(0) == "False"       # import jitcore did not import threadpoolctl
    assert lines == ["1", "1"]
