"""The native intra-op pool, thread settings, inter-op futures and process life.

Tests that depend on process-wide state (env precedence, the set-once rule, fork) run in a
fresh interpreter; the others restore the thread count they change.
"""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, F64, assert_close, assert_same, f64


def _run(code: str, env=None, timeout=120) -> str:
    full_env = dict(os.environ, **(env or {}))
    for k in ("JITCORE_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        if env is None or k not in env:
            full_env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture
def threads():
    saved = jc.get_num_threads()
    yield jc.set_num_threads
    jc.set_num_threads(saved)


def _softmax64(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm64(a, eps=1e-5):
    c = a - a.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)


def _workloads():
    """(jitted function, args, numpy references on float64, the magnitude each output's
    rounding errors are relative to: |terms| of sums (times sqrt of their count), the
    shifted exponent of softmax, |x| where gelu cancels)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 1031)).astype(np.float32)
    v = rng.standard_normal(1 << 20).astype(np.float32)
    a, w = f64(x), f64(v)
    z = np.abs(a - a.max(axis=-1, keepdims=True))
    gelu = 0.5 * w * (1 + np.tanh(np.sqrt(2 / np.pi) * (w + 0.044715 * w ** 3)))
    ln = _layer_norm64(a)
    return [
        (jc.jit(lambda v: jc.gelu(v, approximate="tanh") * 2.0 + 1.0), (v,),
         [gelu * 2.0 + 1.0], [np.abs(w) * 2.0 + 1.0]),
        (jc.jit(lambda x: jc.softmax(x, axis=-1)), (x,),
         [_softmax64(a)], [_softmax64(a) * (z + np.sqrt(1031))]),
        (jc.jit(lambda x: (x.sum(axis=1), x.max(axis=1), x.sum(axis=0))), (x,),
         [a.sum(axis=1), a.max(axis=1), a.sum(axis=0)],
         [np.abs(a).sum(axis=1) * np.sqrt(1031), None, np.abs(a).sum(axis=0) * np.sqrt(512)]),
        (jc.jit(lambda x: jc.layer_norm(x) @ x[:64].T), (x,),
         [ln @ a[:64].T], [(np.abs(ln) + 1) @ np.abs(a[:64].T) * np.sqrt(1031)]),
        (jc.jit(lambda v: v.sum()), (v,), [w.sum()], [np.abs(w).sum() * np.sqrt(w.size)]),
    ]


def test_results_match_numpy_and_are_bitwise_identical_for_1_to_4_threads(threads):
    for f, args, refs, scales in _workloads():
        results = []
        for n in (1, 2, 3, 4):
            threads(n)
            out = f(*args)
            results.append(out if isinstance(out, tuple) else (out,))
        for got, ref, scale in zip(results[0], refs, scales):
            assert_close(got, ref, F32, scale=scale)
        for other in results[1:]:
            for a, b in zip(results[0], other):
                assert_same(b, a)


def test_set_num_threads_validates_and_reports(threads):
    threads(3)
    assert jc.get_num_threads() == 3
    assert "intra-op threads: 3 (from set_num_threads())" in jc.parallel_info()
    for bad in (0, -1, 1.5, "x", True, 10_000):
        with pytest.raises(ValueError):
            jc.set_num_threads(bad)


def test_env_precedence_and_the_api_winning():
    code = "import jitcore as jc; print(jc.get_num_threads())"
    assert _run(code, {"JITCORE_NUM_THREADS": "3", "MKL_NUM_THREADS": "5",
                       "OMP_NUM_THREADS": "7"}) == "3"
    assert _run(code, {"MKL_NUM_THREADS": "5", "OMP_NUM_THREADS": "7"}) == "5"
    assert _run(code, {"OMP_NUM_THREADS": "7"}) == "7"
    cores = len(os.sched_getaffinity(0))
    assert int(_run(code)) <= cores
    assert _run("import jitcore as jc; jc.set_num_threads(2); print(jc.get_num_threads())",
                {"JITCORE_NUM_THREADS": "3"}) == "2"
    info = _run("import jitcore as jc; print(jc.parallel_info())", {"OMP_NUM_THREADS": "7"})
    assert "environment variable OMP_NUM_THREADS" in info and "pool backend" in info


def test_invalid_env_value_warns_and_falls_back():
    """As torch does: a bad value is named in a RuntimeWarning and the next setting is used;
    import jitcore never fails for it."""
    code = "import jitcore as jc; print(jc.get_num_threads())"
    env = {k: v for k, v in os.environ.items()        # (another test's MKL_NUM_THREADS
           if k not in ("JITCORE_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")}  # would win)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(env, JITCORE_NUM_THREADS="lots", OMP_NUM_THREADS="3"))
    assert out.returncode == 0 and out.stdout.strip() == "3", out.stderr
    assert "RuntimeWarning" in out.stderr and "JITCORE_NUM_THREADS" in out.stderr


def test_interop_threads_are_set_once_and_before_work():
    out = _run("""
        import jitcore as jc
        jc.set_num_interop_threads(3)
        print(jc.get_num_interop_threads())
        try:
            jc.set_num_interop_threads(2)
        except RuntimeError:
            print("second call refused")
    """)
    assert out.splitlines() == ["3", "second call refused"]
    out = _run("""
        import numpy as np, jitcore as jc
        jc.jit(lambda x: jc.exp(x))(np.ones(1 << 20))      # intra-op work does not count
        jc.set_num_interop_threads(2)
        print(jc.get_num_interop_threads())
    """)
    assert out == "2"
    out = _run("""
        import jitcore as jc
        jc.wait(jc.fork(lambda: 1))
        try:
            jc.set_num_interop_threads(2)
        except RuntimeError:
            print("refused after work")
    """)
    assert out == "refused after work"
    out = _run("""
        import numpy as np, jitcore as jc
        f = jc.jit(lambda x: jc.wait(jc.fork(lambda v: v * 2.0, x)))
        f(np.ones(4))                                       # a compiled task is inter-op work
        try:
            jc.set_num_interop_threads(2)
        except RuntimeError:
            print("refused after compiled fork")
    """)
    assert out == "refused after compiled fork"


def test_os_thread_count_stays_bounded_under_concurrent_callers():
    out = _run("""
        import os, threading, numpy as np, jitcore as jc
        jc.set_num_threads(2)
        base = len(os.listdir("/proc/self/task"))
        x = np.random.rand(1 << 20).astype(np.float32)
        fs = [jc.jit(lambda x: jc.tanh(x) + 1.0), jc.jit(lambda x: jc.exp(x) * 2.0)]
        forked = jc.jit(lambda x: jc.wait(jc.fork(lambda v: jc.exp(v), x)) + jc.sin(x))
        peak = [0]
        def caller(i):
            for _ in range(20):
                fs[i % 2](x)
                forked(x)                                   # a compiled graph's task
                jc.wait(jc.fork(fs[(i + 1) % 2], x))        # a task from Python
                peak[0] = max(peak[0], len(os.listdir("/proc/self/task")))
        ts = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
        for t in ts: t.start()
        for t in ts: t.join()
        extra = peak[0] - base - 8          # minus the 8 Python threads themselves
        # (one thread feeds each compile worker process: jitcore/llvm/compile_pool.py)
        from jitcore.llvm import compile_pool
        feeders = len(compile_pool._POOL.workers) if compile_pool._POOL is not None else 0
        print(extra, jc.get_num_threads() - 1 + jc.get_num_interop_threads() + feeders)
    """)
    extra, allowed = map(int, out.split())
    assert extra <= allowed


def _same_results_from_8_threads(f, reference, size: int, repeats: int):
    """Eight Python threads call f on their own input; every result must equal the
    single-threaded one, which matches `reference` (numpy on float64), and every thread must
    finish within a minute."""
    xs = [np.random.rand(size).astype(np.float32) + i for i in range(8)]
    refs = [f(x) for x in xs]
    for x, r in zip(xs, refs):
        assert_close(r, reference(f64(x)), F32)
    errors = []

    def check(i):
        for _ in range(repeats):
            if not np.array_equal(f(xs[i]), refs[i]):
                errors.append(i)

    ts = [threading.Thread(target=check, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in ts)


def test_python_threads_get_correct_results_concurrently():
    _same_results_from_8_threads(jc.jit(lambda x: jc.sigmoid(x) * x),
                                 lambda a: a / (1 + np.exp(-a)), 1 << 18, 10)


def test_futures_results_errors_and_done():
    f = jc.jit(lambda x: x * 2.0)
    x = np.arange(10, dtype=np.float64)
    fut = jc.fork(f, x)
    assert_same(jc.wait(fut), x * 2)
    assert fut.done()

    def boom():
        raise KeyError("inside the task")
    with pytest.raises(KeyError, match="inside the task"):
        jc.wait(jc.fork(boom))
    with pytest.raises(TypeError):
        jc.wait(42)


def test_nested_forks_never_deadlock():
    out = _run("""
        import numpy as np, jitcore as jc
        f = jc.jit(lambda x: jc.tanh(x) * 3.0)
        x = np.random.rand(1 << 16).astype(np.float32)
        def level(d):
            if d == 0:
                return float(f(x).sum())
            futs = [jc.fork(level, d - 1) for _ in range(3)]
            return sum(jc.wait(u) for u in futs)
        one = float(f(x).sum())
        ref = float((np.tanh(x.astype(np.float64)) * 3.0).sum())
        print(level(4) == 81 * one, abs(one - ref) <= 1e-5 * abs(ref))   # 3^4 leaves
    """, timeout=120)
    assert out == "True True"


def _mm(x, w):
    return x @ w


def test_fork_inside_jit_is_a_native_task_of_the_graph():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    w1, w2 = (rng.standard_normal((128, 32)).astype(np.float32) for _ in range(2))

    @jc.jit
    def forward(x, w1, w2):
        fut = jc.fork(_mm, x, w2)
        y = x @ w1
        return y + jc.wait(fut)

    ref = x.astype(np.float64) @ w1 + x.astype(np.float64) @ w2
    terms = (np.abs(x.astype(np.float64)) @ (np.abs(w1) + np.abs(w2))) * np.sqrt(128)
    assert_close(forward(x, w1, w2), ref, F32, scale=terms)
    text = forward.graph(x, w1, w2)
    assert "forkarg" in text and "wait" in text
    tasks = [k.task for k in forward.kernels(x, w1, w2)]
    assert tasks.count(0) == 1 and tasks.count(None) == 2
    assert "jc_task_spawn" in forward.llvm_ir(x, w1, w2, optimized=False)


def test_several_forks_tuples_jitted_bodies_and_nesting(threads):
    x = np.linspace(-2, 2, 4099, dtype=np.float64)
    inner = jc.jit(lambda v: (jc.exp(v), v * 2.0))

    def nested(v):                       # a fork inside a forked function runs inline
        return jc.wait(jc.fork(lambda u: u + 1.0, v)) * 3.0

    @jc.jit
    def f(x):
        a = jc.fork(inner, x)
        b = jc.fork(nested, x)
        c = jc.fork(lambda v: v.sum(), jc.wait(b))     # depends on b: runs after it
        e, d = jc.wait(a)
        return e + d, jc.wait(c), jc.wait(b)

    r = f(x)
    assert_close(r[0], np.exp(x) + 2 * x, F64, scale=np.exp(x) + np.abs(2 * x))
    assert_close(r[1], ((x + 1) * 3).sum(), F64, scale=(np.abs(x + 1) * 3).sum() * 64)
    assert_close(r[2], (x + 1) * 3, F64, scale=(np.abs(x) + 1) * 3)
    for n in (1, 2, 3):                  # and identical for any thread count
        threads(n)
        for got, want in zip(f(x), r):
            assert_same(got, want)


def test_compiled_forks_from_many_python_threads():
    f = jc.jit(lambda x: jc.wait(jc.fork(lambda v: jc.tanh(v) * 2.0, x)) + x)
    _same_results_from_8_threads(f, lambda a: np.tanh(a) * 2.0 + a, 1 << 16, 20)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_uses_the_pool():
    out = _run("""
        import os, numpy as np, jitcore as jc
        jc.set_num_threads(2)
        f = jc.jit(lambda x: jc.exp(x) + 1.0)
        x = np.random.rand(1 << 20).astype(np.float32)
        ref = f(x)
        pid = os.fork()
        if pid == 0:                     # the child: same results, and a fresh compile works
            g = jc.jit(lambda x: jc.exp(x) * 2.0)
            ok = np.array_equal(f(x), ref) and np.allclose(g(x), np.exp(x) * 2.0, rtol=1e-6)
            ok &= np.allclose(ref, np.exp(x.astype(np.float64)) + 1.0, rtol=1e-6, atol=0)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """, timeout=60)
    assert out == "0"


def test_interpreter_exit_does_not_hang_with_busy_workers():
    _run("""
        import numpy as np, jitcore as jc
        jc.set_num_threads(2)
        f = jc.jit(lambda x: jc.tanh(x))
        x = np.random.rand(1 << 20).astype(np.float32)
        for _ in range(3):
            f(x)
    """, timeout=30)


def test_long_compiled_calls_release_the_gil():
    out = _run("""
        import sys, threading, time, numpy as np, jitcore as jc
        sys.setswitchinterval(0.0005)
        jc.set_num_threads(1)
        f = jc.jit(lambda x: jc.tanh(jc.exp(jc.sin(x))))
        x = np.random.rand(1 << 23).astype(np.float32)
        f(x)
        ticks, stop = [0], [False]
        def spin():
            while not stop[0]:
                ticks[0] += 1
        t = threading.Thread(target=spin)
        t.start()
        time.sleep(0.01)
        before, t0 = ticks[0], time.perf_counter()
        f(x); f(x)                       # while the kernel runs, the Python thread counts
        during, elapsed = ticks[0] - before, time.perf_counter() - t0
        before = ticks[0]
        time.sleep(elapsed)              # reference: the same time with the GIL free
        free = ticks[0] - before
        stop[0] = True
        t.join()
        print(during / max(free, 1))     # about 1 when released, ~0.02 when held
    """)
    assert float(out) > 0.3


def test_jit_num_threads_pins_a_function(threads):
    x = np.random.rand(1 << 22).astype(np.float32)
    one = jc.jit(lambda x: jc.exp(x) * 2.0, num_threads=1)
    assert "jc_parallel_for" not in one.llvm_ir(x, optimized=False)
    default = jc.jit(lambda x: jc.exp(x) * 2.0)
    assert "jc_parallel_for" in default.llvm_ir(x, optimized=False)
    threads(2)
    assert_close(one(x), np.exp(f64(x)) * 2.0, F32)
    assert_same(default(x), one(x))
    with pytest.raises(ValueError):
        jc.jit(lambda x: x, num_threads=0)


def test_forked_tasks_leave_the_in_flight_count_at_zero():
    """Regions leave one worker out per task in flight: the count must return to zero after
    forks from Python, native forks in a graph, nested forks and tasks that raise."""
    from jitcore.parallel import tasks_in_flight
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    w = rng.standard_normal((128, 32)).astype(np.float32)

    @jc.jit
    def forward(x, w1, w2):
        fut = jc.fork(_mm, x, w2)
        return x @ w1 + jc.wait(fut)

    double = jc.jit(lambda x: x * 2.0)
    for _ in range(20):
        futs = [jc.fork(double, x) for _ in range(5)]
        forward(x, w, w)
        for f in futs:
            f.wait()
    bad = jc.jit(lambda a, b: a @ b)
    with pytest.raises(jc.ShapeError):                       # a task that raises
        jc.wait(jc.fork(bad, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)))
    assert tasks_in_flight() == 0
