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
                          env={**os.environ, **(env or {})})
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


CLOSE = """
import numpy as np

def close(got, want, terms, dtype=np.float32, ulps=4):
    \"\"\"got has dtype and want's shape, and is within `ulps` ulp of `terms` (the magnitude
    of what each value is computed from: its rounding errors are relative to that) of want
    (float64 reference values).\"\"\"
    got = np.asarray(got)
    bound = ulps * np.finfo(dtype).eps * np.maximum(np.abs(want), terms)
    return (got.dtype == dtype and got.shape == np.shape(want)
            and bool(np.all(np.abs(got.astype(np.float64) - want) <= bound)))
"""


def test_eight_threads_call_and_compile_concurrently():
    out = run_script(prelude=THREADS + CLOSE, code="""
        import numpy as np, jitcore as jc
        shared = jc.jit(lambda a, b: jc.tanh(a * b) + a.sum(axis=-1, keepdims=True))
        before = jc.cache_info()["compiles"]

        def worker(k):
            rng = np.random.default_rng(k)
            for i in range(30):
                n = 16 + (i % 5)                     # 5 signatures shared by all threads
                a = rng.standard_normal((n, 33)).astype(np.float32)
                b = rng.standard_normal((n, 33)).astype(np.float32)
                x, y = a.astype(np.float64), b.astype(np.float64)
                rows = np.abs(x).sum(axis=-1, keepdims=True) * np.sqrt(33)
                assert close(shared(a, b), np.tanh(x * y) + x.sum(axis=-1, keepdims=True),
                             np.abs(x * y) + rows), (k, i)
                own = jc.jit(lambda x, s=k + i: x * s + 1.0)   # a new function per call
                assert close(own(a), x * (k + i) + 1.0, np.abs(x * (k + i)) + 1.0)
                w = rng.standard_normal((33, 8)).astype(np.float32)
                assert close(jc.jit(lambda a, w: a @ w)(a, w), x @ w,
                             np.abs(x) @ np.abs(w) * np.sqrt(33))

        run_in_threads(worker)
        # one compile per distinct graph: `shared` and the matmul at 5 shapes each, and one
        # per distinct (s, n) of the threads' own functions (the same graph from two
        # threads is compiled once)
        own = {(k + i, 16 + i % 5) for k in range(8) for i in range(30)}
        print("compiles", jc.cache_info()["compiles"] - before, "expected", 5 + 5 + len(own))
    """)
    words = out.split()
    assert words[0] == "compiles" and words[1] == words[3], out


def test_one_compile_per_key_under_contention():
    out = run_script(prelude=CLOSE, code="""
        import threading, numpy as np, jitcore as jc
        f = jc.jit(lambda x: jc.exp(x) * 2.0 - x)
        x = np.linspace(-1, 1, 1000, dtype=np.float32)
        barrier = threading.Barrier(8)
        before = jc.cache_info()["compiles"]
        def go():
            barrier.wait()
            a = x.astype(np.float64)
            for _ in range(20):                   # exp(x)*2 - x cancels: relative to the terms
                assert close(f(x), np.exp(a) * 2 - a, np.exp(a) * 2 + np.abs(a))
        ts = [threading.Thread(target=go) for _ in range(8)]
        [t.start() for t in ts]; [t.join(120) for t in ts]
        print("new compiles", jc.cache_info()["compiles"] - before)
    """)
    assert "new compiles 1" in out


def test_threads_calling_while_the_caches_evict():
    """JITCORE_CACHE_SIZE=2: eight threads cycle through 6 signatures of two shared functions,
    so compiled graphs are evicted while other threads still run them (each call holds the
    code it runs; a use after free would crash or give garbage)."""
    out = run_script(prelude=THREADS + CLOSE, code="""
        import numpy as np, jitcore as jc
        assert jc.cache_info()["max_size"] == 2
        f = jc.jit(lambda a: jc.tanh(a) * 2.0 + 1.0)
        g = jc.jit(lambda a, b: (a * b).sum(axis=-1))

        def worker(k):
            for i in range(40):
                n = 1000 + 37 * ((i + k) % 6)
                x = np.linspace(-2, 2, n, dtype=np.float32)
                a = x.astype(np.float64)
                assert close(f(x), np.tanh(a) * 2 + 1, np.abs(np.tanh(a) * 2) + 1)
                y = x.reshape(-1, 1)[: n - n % 4].reshape(4, -1)
                b = y.astype(np.float64)
                sq = (b * b).sum(axis=-1)
                assert close(g(y, y), sq, sq * np.sqrt(b.shape[1]))

        run_in_threads(worker)
        print("compiles", jc.cache_info()["compiles"])
    """, env={"JITCORE_CACHE_SIZE": "2", "JITCORE_DISK_CACHE": "0"})
    assert int(out.split()[-1]) > 12          # evictions forced recompiles


def test_os_fork_children_use_jitcore():
    run_script(prelude=CLOSE, code="""
        import os, math, numpy as np, jitcore as jc
        f = jc.jit(lambda a: jc.gelu(a) + a.sum())
        x = np.linspace(-2, 2, 100_000, dtype=np.float32)
        want = f(x)                                   # the parent has pools and workers
        a = x.astype(np.float64)
        erf = np.vectorize(math.erf)
        s = a.sum()                                   # the sum of 100,000 terms cancels
        assert close(want, 0.5 * a * (1 + erf(a / math.sqrt(2))) + s,
                     np.abs(a) + np.abs(s) + np.abs(a).sum() * math.sqrt(a.size))
        jc.jit(lambda a: a * 3.0)(x)
        pids = []
        for k in range(3):
            pid = os.fork()
            if pid == 0:                              # child: old, new, parallel kernels
                try:
                    ok = np.array_equal(f(x), want)
                    g = jc.jit(lambda a, k=k: a * k + jc.exp(a))
                    ok &= close(g(x), a * k + np.exp(a), np.abs(a * k) + np.exp(a))
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
    run_script(prelude=CLOSE, code="""
        import os, threading, time, numpy as np, jitcore as jc
        x = np.linspace(-1, 1, 1000, dtype=np.float32)
        a = x.astype(np.float64)
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
                    ok = close(g(x), np.sin(a) * i + 2, np.abs(np.sin(a) * i) + 2)
                    os._exit(0 if ok else 3)
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


def test_llvmlite_string_escapes_are_ready_before_threads_compile():
    """llvmlite fills its string-escape table on first use without a lock (threads compiling
    at once read a missing entry: KeyError 108); importing jitcore fills it first."""
    out = run_script(code="""
        import jitcore, llvmlite.ir.values as values
        table = values._escape_string.__defaults__[0]
        print(len(table))
    """)
    assert int(out.split()[-1]) == 256
