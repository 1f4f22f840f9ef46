"""Many Python threads calling and compiling jitted functions at once; os.fork() children and
multiprocessing (fork and spawn) using jitcore: correct results, one compile per cache key,
no crash or deadlock within a bounded time (each scenario runs in a subprocess with a
timeout, so a hang fails the test instead of the run)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = str(Path(__file__).resolve().parents[1])


def run_script(code: str, timeout: int = 240, tmp_path=None, env=None, prelude="") -> str:
    """Run prelude + code in a fresh interpreter (from a file when tmp_path is given:
    multiprocessing's spawn re-imports the main module), with `env` added to the
    environment."""
    source = prelude + textwrap.dedent(code)
    if tmp_path is not None:
        script = tmp_path / "scenario.py"
        script.write_text(source)
        cmd = [sys.executable, str(script)]
    else:
        cmd = [sys.executable, "-c", source]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": REPO, **(env or {})})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n" \
                                 f"{proc.stderr[-3000:]}"
    return proc.stdout


THREADS = """
import threading

def run_in_threads(worker, n=8, timeout=180):
    \"\"\"worker(k) on n threads started together; no error, and all done in time.\"\"\"
    errors, barrier = [], threading.Barrier(n)
    def body(k):
        try:
            barrier.wait()
            worker(k)
        except Exception as e:
            errors.append(repr(e))
    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads: t.start()
    for t in threads: t.join(timeout)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors, errors[:3]
"""


def test_eight_threads_call_and_compile_concurrently():
    out = run_script(prelude=THREADS, code="""
        import numpy as np, jitcore as jc
        shared = jc.jit(lambda a, b: jc.tanh(a * b) + a.sum(axis=-1, keepdims=True))

        def worker(k):
            rng = np.random.default_rng(k)
            for i in range(30):
                n = 16 + (i % 5)                     # 5 signatures shared by all threads
                a = rng.standard_normal((n, 33)).astype(np.float32)
                b = rng.standard_normal((n, 33)).astype(np.float32)
                got = shared(a, b)
                want = np.tanh(a * b) + a.sum(axis=-1, keepdims=True)
                assert np.allclose(got, want, rtol=1e-4, atol=1e-4), (k, i)
                own = jc.jit(lambda x, s=k + i: x * s + 1.0)   # a new compile per call
                assert np.allclose(own(a), a * (k + i) + 1.0)
                w = rng.standard_normal((33, 8)).astype(np.float32)
                assert np.allclose(jc.jit(lambda a, w: a @ w)(a, w), a @ w, atol=1e-4)

        run_in_threads(worker)
        # 5 shapes of `shared`, each compiled once; every thread's own functions compiled
        info = jc.cache_info()
        print("compiles", info["compiles"], "hits", info["hits"])
    """)
    assert "compiles" in out


def test_one_compile_per_key_under_contention():
    out = run_script("""
        import threading, numpy as np, jitcore as jc
        f = jc.jit(lambda x: jc.exp(x) * 2.0 - x)
        x = np.linspace(-1, 1, 1000, dtype=np.float32)
        barrier = threading.Barrier(8)
        before = jc.cache_info()["compiles"]
        def go():
            barrier.wait()
            for _ in range(20):
                assert np.allclose(f(x), np.exp(x) * 2 - x, rtol=1e-5)
        ts = [threading.Thread(target=go) for _ in range(8)]
        [t.start() for t in ts]; [t.join(120) for t in ts]
        print("new compiles", jc.cache_info()["compiles"] - before)
    """)
    assert "new compiles 1" in out


def test_threads_calling_while_the_caches_evict():
    """JITCORE_CACHE_SIZE=2: eight threads cycle through 6 signatures of two shared functions,
    so compiled graphs are evicted while other threads still run them (each call holds the
    code it runs; a use after free would crash or give garbage)."""
    out = run_script(prelude=THREADS, code="""
        import numpy as np, jitcore as jc
        assert jc.cache_info()["max_size"] == 2
        f = jc.jit(lambda a: jc.tanh(a) * 2.0 + 1.0)
        g = jc.jit(lambda a, b: (a * b).sum(axis=-1))

        def worker(k):
            for i in range(40):
                n = 1000 + 37 * ((i + k) % 6)
                x = np.linspace(-2, 2, n, dtype=np.float32)
                assert np.allclose(f(x), np.tanh(x) * 2 + 1, rtol=1e-5, atol=1e-6)
                y = x.reshape(-1, 1)[: n - n % 4].reshape(4, -1)
                assert np.allclose(g(y, y), (y * y).sum(axis=-1), rtol=1e-4)

        run_in_threads(worker)
        print("compiles", jc.cache_info()["compiles"])
    """, env={"JITCORE_CACHE_SIZE": "2", "JITCORE_DISK_CACHE": "0"})
    assert int(out.split()[-1]) > 12          # evictions forced recompiles


def test_os_fork_children_use_jitcore():
    run_script("""
        import os, numpy as np, jitcore as jc
        f = jc.jit(lambda a: jc.gelu(a) + a.sum())
        x = np.linspace(-2, 2, 100_000, dtype=np.float32)
        want = f(x)                                   # the parent has pools and workers
        jc.jit(lambda a: a * 3.0)(x)
        pids = []
        for k in range(3):
            pid = os.fork()
            if pid == 0:                              # child: old, new, parallel kernels
                try:
                    ok = np.array_equal(f(x), want)
                    g = jc.jit(lambda a, k=k: a * k + jc.exp(a))
                    ok &= np.allclose(g(x), x * k + np.exp(x), rtol=1e-5, atol=1e-5)
                    ok &= np.allclose(jc.wait(jc.fork(f, x)), want)
                    os._exit(0 if ok else 3)
                except BaseException:
                    os._exit(4)
            pids.append(pid)
        codes = [os.waitpid(p, 0)[1] for p in pids]
        assert codes == [0, 0, 0], codes
        assert np.array_equal(f(x), want)             # the parent still works
    """)


def test_fork_while_another_thread_compiles():
    """A lock held by another thread at fork time stays locked in the child: the child's
    first compile hung (15 of 20 forks) until the LLVM lock was held across fork and the
    other locks renewed in the child."""
    run_script("""
        import os, threading, time, numpy as np, jitcore as jc
        x = np.linspace(-1, 1, 1000, dtype=np.float32)
        stop = False
        def compile_forever():
            k = 0
            while not stop:
                jc.jit(lambda a, k=k: jc.tanh(a) * float(k) + jc.exp(a))(x)
                k += 1
        threading.Thread(target=compile_forever, daemon=True).start()
        time.sleep(0.2)
        codes = []
        for i in range(10):
            pid = os.fork()
            if pid == 0:
                try:
                    g = jc.jit(lambda a, i=i: jc.sin(a) * float(i) + 2.0)
                    os._exit(0 if np.allclose(g(x), np.sin(x) * i + 2, atol=1e-5) else 3)
                except BaseException:
                    os._exit(4)
            deadline = time.time() + 30
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes.append(os.waitstatus_to_exitcode(status))
                    break
                if time.time() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    codes.append("hang")
                    break
                time.sleep(0.01)
        stop = True
        assert codes == [0] * 10, codes
    """)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_pools(method, tmp_path):
    out = run_script(f"""
        import multiprocessing as mp, numpy as np

        def work(k):
            import jitcore as jc
            x = np.arange(1000, dtype=np.float64) + k
            return float(jc.jit(lambda a: (a * 2.0 + 1.0).sum())(x))

        if __name__ == "__main__":
            import jitcore as jc
            jc.jit(lambda a: a + 1)(np.ones(10))      # the parent uses jitcore first
            with mp.get_context("{method}").Pool(2) as pool:
                got = pool.map(work, range(6))
            want = [float(((np.arange(1000) + k) * 2.0 + 1.0).sum()) for k in range(6)]
            assert got == want, (got, want)
            print("ok")
    """, tmp_path=tmp_path)
    assert "ok" in out
