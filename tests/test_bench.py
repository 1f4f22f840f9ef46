"""The benchmark suite (`python -m jitcore bench`) in its tiny mode: every workload runs and
checks against its float64 reference in child processes, the table, JSON and exit status
come out, and a peer that is not installed is reported, not dropped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jitcore.bench import cli
from jitcore.bench.workloads import SUITE

REPO = str(Path(__file__).resolve().parents[1])


def test_tiny_suite_runs_every_workload(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-m", "jitcore", "bench", "--tiny", "--threads", "1,2",
                           "--systems", "jitcore,numpy,numexpr", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert set(data["workloads"]) == {w.name for w in SUITE}
    jit_runs = [r for r in data["runs"] if r["system"] == "jitcore"]
    assert sorted(r["threads"] for r in jit_runs) == [1, 2]
    for run in jit_runs:
        assert all(c["status"] == "ok" for c in run["results"].values()), run["results"]
        assert run["bandwidth_gbs"]["copy"] > 0
    numexpr = [r for r in data["runs"] if r["system"] == "numexpr"]
    statuses = {c["status"] for r in numexpr for c in r["results"].values()}
    assert statuses <= {"ok", "n/a", "missing"} and statuses
    for name in ("chain", "softmax", "mlp2", "fork_wait"):
        assert name in proc.stdout


def test_missing_peer_is_reported(monkeypatch, capsys):
    monkeypatch.setitem(cli.SYSTEM_MODULES, "numba", "no_such_module_for_jitcore_tests")
    opts = cli.parse(["--tiny", "--only", "chain", "--systems", "jitcore,numba",
                      "--threads", "1"])
    data = cli.run_suite(opts.names, opts.systems_list, opts.threads_list, opts)
    cli.print_tables(data)
    numba = next(r for r in data["runs"] if r["system"] == "numba")
    assert numba["results"]["chain"]["status"] == "missing"
    assert "not installed: numba" in capsys.readouterr().out


def test_unknown_names_are_refused():
    proc = subprocess.run([sys.executable, "-m", "jitcore", "bench", "--only", "nope"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 2 and "unknown: nope" in proc.stderr
