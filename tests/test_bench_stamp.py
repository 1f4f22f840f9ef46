"""Results that say where they come from (issue 31): every result's stamp (commit, date, CPU,
versions, settings), the tables' caption drawn from it, first-call tables labelled cold /
warm only where both were measured, and JAX's thread settings as XLA parses them. No
benchmark runs here: synthetic results and the saved files of examples/results."""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

from jitcore.bench import cli, markdown, stamp
from jitcore.bench.peers_runtimes import ORT_SETTINGS

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "examples" / "results"


def _git(*args):
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def stamped():
    return stamp.stamp({"command": "python -m jitcore bench --only chain", "threads": [1]})


def test_stamp_fields_are_present_and_typed(stamped):
    """The commit is HEAD's where jitcore runs from a git checkout; an installed copy (CI's
    pip install .) has none and says so with None."""
    checkout = subprocess.run(["git", "-C", str(stamp.REPO), "rev-parse", "HEAD"],
                              capture_output=True, text=True)
    if checkout.returncode == 0 and (stamp.REPO / "jitcore").resolve() == \
            Path(stamp.__file__).resolve().parents[1]:
        assert stamped["commit"] == checkout.stdout.strip() == _git("rev-parse", "HEAD")
        assert isinstance(stamped["dirty"], bool)
    else:
        assert stamped["commit"] is None and stamped["dirty"] is None
    date = datetime.datetime.fromisoformat(stamped["date"])
    assert date.utcoffset() == datetime.timedelta(0)
    cpu = stamped["cpu"]
    assert isinstance(cpu["model"], str) and cpu["model"]
    assert isinstance(cpu["flags"], list) and all(isinstance(f, str) for f in cpu["flags"])
    assert all(f.startswith(stamp.FLAG_PREFIXES) for f in cpu["flags"])
    assert cpu["logical_cpus"] >= cpu["usable_cpus"] >= 1
    if Path("/proc/cpuinfo").exists():
        assert 1 <= cpu["physical_cores"] <= cpu["logical_cpus"]
        if "avx2" in Path("/proc/cpuinfo").read_text():
            assert "avx2" in cpu["flags"]
    for level in ("L2", "L3"):
        assert level not in cpu or (isinstance(cpu[level], int) and cpu[level] >= 1 << 16)
    versions = stamped["versions"]
    from jitcore.version import VERSION
    import numpy
    assert versions["jitcore"] == VERSION and versions["numpy"] == numpy.__version__
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert stamped["settings"]["threads"] == [1]
    json.dumps(stamped)                                 # it goes into a JSON file as is


def test_caption_names_machine_commit_and_date(stamped):
    text = stamp.caption({"stamp": stamped})
    cpu = stamped["cpu"]
    assert text.startswith(cpu["model"])
    assert f"{cpu['physical_cores'] or cpu['logical_cpus']} cores" in text
    assert f"commit {(stamped['commit'] or 'unknown')[:7]}" in text
    assert text.endswith(stamped["date"][:10])
    assert ("uncommitted" in text) == bool(stamped["dirty"])


def test_caption_of_a_result_from_before_stamps():
    data = json.loads((RESULTS / "bench_fair_alloc.json").read_text())
    assert "stamp" not in data
    text = stamp.caption(data)
    assert "emeraldrapids" in text and "commit not recorded" in text
    assert text.endswith(data["date"][:10])


def _suite(cold_flag, cold_s):
    """A one-workload, one-system kernel-suite result."""
    c = {"status": "ok", "median_s": 0.01, "first_call_s": 0.05, "first_call_cold_s": cold_s,
         "compute_only": {"status": "ok", "median_s": 0.01}, "bytes": 1e6}
    data = {"date": "2026-12-03T12:00:00+00:00", "runs_count": 1,
            "machine": {"brand": "AMD EPYC", "cpu": "znver4", "cpus": 2},
            "workloads": {"chain": "chain"},
            "runs": [{"system": "jitcore", "threads": 1, "results": {"chain": c}}]}
    if cold_flag is not None:
        data["cold"] = cold_flag
    return data


@pytest.mark.parametrize("cold_flag, cold_s, both", [
    (True, 0.2, True), (False, None, False),
    (None, 0.2, True),        # a result from before the flag: cold where cold figures exist
    (None, None, False)])
def test_first_call_tables_say_cold_only_where_it_was_measured(cold_flag, cold_s, both):
    text = markdown.tables(_suite(cold_flag, cold_s))
    assert ("cold cache / warm cache" in text) == both
    assert ("warm cache (no cold-cache child" in text) == (not both)
    row = text.split("first call", 1)[1].split("| chain | ", 1)[1].splitlines()[0]
    assert row == ("200 / 50 |" if both else "50 |")


def test_saved_no_cold_runs_render_warm_only():
    """The README's first-call tables of these runs were labelled cold / warm; they came from
    --no-cold runs (no cold figure at all): the renderer labels them warm only."""
    for name in ("bench_fair_alloc.json", "bench_cnn.json", "models_cnn_b1.json"):
        text = markdown.tables(json.loads((RESULTS / name).read_text()))
        assert "cold cache / warm cache" not in text and "- / " not in text, name
        assert "warm cache (no cold" in text, name
    models = markdown.tables(json.loads((RESULTS / "models.json").read_text()))
    assert "cold cache / warm cache" in models          # that run had cold children


def test_rendered_tables_start_with_the_caption(stamped):
    data = _suite(False, None)
    data["stamp"] = stamped
    text = markdown.tables(data)
    assert text.splitlines()[0] == f"Measured on {stamp.caption(data)}."


def test_render_command_prints_a_saved_result():
    proc = subprocess.run([sys.executable, "-m", "jitcore", "bench", "--render",
                           str(RESULTS / "models_cnn_b8.json")], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Measured on AMD EPYC (znver4)")
    assert "| resnet18 | " in proc.stdout and "batch 8" in proc.stdout


def xla_parse(flags: str) -> list:
    """The words XLA takes from XLA_FLAGS (xla/parse_flags_from_env.cc): flags up to the first
    word that does not start with '-'; the rest is dropped without a word."""
    taken = []
    for word in flags.split():
        if not word.startswith("-"):
            break
        taken.append(word)
    return taken


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_jax_threads_are_set_as_xla_reads_them(threads):
    env = cli.jax_thread_env(threads)
    flags = env["XLA_FLAGS"]
    assert xla_parse(flags) == flags.split()           # nothing dropped
    assert all(w.startswith("--xla_") for w in flags.split())    # XLA dies on unknown flags
    eigen = "true" if threads > 1 else "false"
    assert f"--xla_cpu_multi_thread_eigen={eigen}" in flags.split()
    assert env["PJRT_NPROC"] == env["NPROC"] == str(threads)
    child = cli.child_env(threads, "/tmp/cache")
    assert {k: child[k] for k in env} == env


def test_the_target_isa_flag_is_read_after_the_thread_flag():
    env = cli.child_env(2, "/tmp/cache", target="x86-64-v3")
    words = xla_parse(env["XLA_FLAGS"])
    assert "--xla_cpu_multi_thread_eigen=true" in words
    assert "--xla_cpu_max_isa=AVX2" in words


def test_settings_record_the_command_and_the_peers():
    argv = ["--only", "chain,mlp2", "--threads", "1,2", "--no-cold", "--repeat", "3"]
    opts = cli.parse(argv)
    found = cli.settings(opts, argv)
    assert found["command"] == "python -m jitcore bench " + " ".join(argv)
    assert found["names"] == ["chain", "mlp2"] and found["threads"] == [1, 2]
    assert found["cold"] is False and found["repeat"] == 3 and found["runs"] == 1
    assert found["target"] == "native" and "torch.compile-max-autotune" in found["systems"]
    peers = found["peers"]
    assert peers["jax"]["2"] == cli.jax_thread_env(2)
    assert peers["onnxruntime"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert peers["torch.compile"]["torch.compile-max-autotune"]["mode"] == "max-autotune"
    json.dumps(found)


def test_ort_optimization_level_is_one_onnxruntime_has():
    ort = pytest.importorskip("onnxruntime")
    assert hasattr(ort.GraphOptimizationLevel, ORT_SETTINGS["graph_optimization_level"])


def test_max_autotune_runs_the_matmul_rows_only():
    pytest.importorskip("torch")
    import numpy as np

    from jitcore.bench import peers_torch
    from jitcore.bench.workloads import BY_NAME
    out = np.zeros(1, np.float32)
    for name in ("chain", "softmax", "conv3x3_64", "max_pool_3x3s2"):
        assert peers_torch.max_autotune_calls(name, (), out) is None, name
    matmuls = {n for n in BY_NAME if BY_NAME[n].gemm and n not in peers_torch.CONV}
    assert {"linear_gelu", "mlp2", "fork_wait"} <= matmuls

