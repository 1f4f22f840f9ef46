"""JITCORE_PERF_MAP: compiled kernels named in perf's map file, and `python -m jitcore profile`
(jitcore/perfmap.py, jitcore/profile_cli.py)."""
import glob
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitcore as jc
from jitcore import config, perfmap
from jitcore.profile_cli import samples, summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def map_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(perfmap, "MAP_DIR", str(tmp_path))
    return tmp_path


def _entries(path) -> list:
    out = []
    for line in path.read_text().splitlines():
        start, size, name = line.split(" ", 2)
        out.append((int(start, 16), int(size, 16), name))
    return out


def test_a_compile_names_its_kernels_run_and_entry(map_dir):
    def two_kernels(x, w):
        return jc.exp(x) * 2.0 + 1.0, (x @ w).sum()
    x = np.random.default_rng(0).random((40, 40)).astype(np.float32)
    with config.override(perf_map=True):
        f = jc.jit(two_kernels)
        got = f(x, x)
    np.testing.assert_allclose(got[0], np.exp(x) * 2 + 1, rtol=1e-6)
    entries = _entries(map_dir / f"perf-{os.getpid()}.map")
    names = [n for _, _, n in entries]
    kernels = f.kernels(x, x)
    for k in kernels:          # each kernel by graph, name, kind and ops
        assert any(n.startswith(f"jitcore:two_kernels:{k.name} {k.kind} ")
                   and "+".join(k.ops) in n for n in names), (k, names)
    assert "jitcore:two_kernels:run" in names and "jitcore:two_kernels:entry" in names
    starts = sorted(s for s, _, _ in entries)
    assert len(set(starts)) == len(starts) and all(s > 0 for s in starts)
    for start, size, _ in entries:      # sized up to the next symbol, never overlapping
        nxt = [s for s in starts if s > start]
        assert 0 < size <= perfmap.MAX_SIZE
        assert not nxt or start + size <= min(nxt)


def test_without_the_setting_nothing_is_written(map_dir):
    f = jc.jit(lambda a: a * 5.0 - 1.0)
    f(np.ones(17, np.float32))
    assert not (map_dir / f"perf-{os.getpid()}.map").exists()


def test_equal_layers_share_one_named_entry():
    class K:                                   # a kernel report's fields perfmap reads
        def __init__(self, name):
            self.name, self.kind, self.ops = name, "conv", ("conv2d", "maximum")
    assert perfmap.kernel_name("net", [K("k3_conv2d")]) == \
        "jitcore:net:k3_conv2d conv conv2d+maximum"
    assert perfmap.kernel_name("net", [K("k3_conv2d"), K("k7_conv2d")]).endswith("(x2)")


def test_sizes_reach_the_next_symbol_and_stay_bounded():
    lines = perfmap.lines({0x1000: "a", 0x1400: "b", 0x1400 + 2 * perfmap.MAX_SIZE: "c"})
    assert lines == ["1000 400 a", f"1400 {perfmap.LAST_SIZE:x} b",
                     f"{0x1400 + 2 * perfmap.MAX_SIZE:x} {perfmap.LAST_SIZE:x} c"]


REPORT = textwrap.dedent("""\
    # Overhead;Shared Object;Symbol
     40.00% ;[JIT] tid 11 ;[.] jitcore:net:k1_conv2d conv conv2d+maximum (x3)
     10.00% ;[JIT] tid 12 ;[.] jitcore:net:k1_conv2d conv conv2d+maximum (x3)
     20.00% ;libpython3.11.so.1.0 ;[.] _PyEval_EvalFrameDefault
     5.00%  ;[JIT] tid 11 ;[.] jitcore:net:k0_add pointwise add
     2.00%  ;[kernel.kallsyms] ;[k] clear_page_erms
    """)


def test_the_report_sums_a_kernel_over_threads_and_ranks_it():
    rows = samples(REPORT)
    assert rows[0] == (50.0, "[JIT]", "jitcore:net:k1_conv2d conv conv2d+maximum (x3)")
    text = summary(rows, top=10)
    lines = text.splitlines()
    assert "net:k1_conv2d conv conv2d+maximum (x3)" in lines[1] and "50.00%" in lines[1]
    assert "90.91%" in lines[1]                  # 50 of jitcore's 55
    assert any("55.00%" in ln and "all jitcore code" in ln for ln in lines)
    assert any("libpython3.11.so.1.0" in ln and "20.00%" in ln for ln in lines)


def _perf_works() -> bool:
    perf = shutil.which("perf")
    if perf is None:
        return False
    run = subprocess.run([perf, "record", "-e", "cpu-clock", "-o", os.devnull, "--", "true"],
                         capture_output=True)
    return run.returncode == 0


@pytest.mark.skipif(not _perf_works(), reason="Linux perf is absent or not permitted here")
def test_profile_command_names_the_kernels_that_ran(tmp_path):
    script = tmp_path / "busy.py"
    script.write_text(textwrap.dedent("""\
        import numpy as np, jitcore as jc
        @jc.jit
        def busy(x):
            return jc.tanh(jc.exp(x) * 0.5)
        x = np.random.default_rng(0).random(1 << 20).astype(np.float32)
        for _ in range(300):
            busy(x)
        """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    maps_before = set(glob.glob("/tmp/perf-*.map"))
    run = subprocess.run([sys.executable, "-m", "jitcore", "profile", str(script)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "busy:k0_" in run.stdout and "all jitcore code" in run.stdout, run.stdout
    left = [p for p in set(glob.glob("/tmp/perf-*.map")) - maps_before
            if "jitcore:busy" in open(p).read()]
    assert not left, f"the script's perf maps were left behind: {left}"
