"""The benchmark suite (`python -m jitcore bench`) in its tiny mode: every workload runs and
checks against its float64 reference in child processes pinned to as many cores as threads;
natural-use and compute-only timings, CPU per wall second, page faults, system time, cold and
warm first calls come out in the JSON and the tables; --runs aggregates interleaved runs; a
wrong or missing peer is reported, not dropped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jitcore.bench import child, cli, markdown, peak, roofline
from jitcore.bench.workloads import BF16_GEMMS, BY_NAME, SUITE

REPO = str(Path(__file__).resolve().parents[1])
TIMED_FIELDS = ("median_s", "min_s", "cpu_per_wall", "minflt_per_call", "sys_s_per_call")


def run_cli(tmp_path, *args):
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "jitcore", "bench", "--tiny", *args,
                           "--json", str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    """The whole suite, tiny, jitcore, numpy and numexpr at 1 and 2 threads (no cold
    children: the --runs test covers those)."""
    return run_cli(tmp_path_factory.mktemp("bench"), "--threads", "1,2",
                   "--systems", "jitcore,numpy,numexpr", "--no-cold")


def test_tiny_suite_runs_every_workload(tiny_suite):
    data, stdout = tiny_suite
    assert set(data["workloads"]) == {w.name for w in SUITE}
    jit_runs = [r for r in data["runs"] if r["system"] == "jitcore"]
    assert sorted(r["threads"] for r in jit_runs) == [1, 2]
    for run in jit_runs:
        for name, c in run["results"].items():
            assert c["status"] == "ok", (name, c)
            assert c["compute_only"]["status"] == "ok", (name, c["compute_only"])
            for field in TIMED_FIELDS:
                assert c[field] >= 0 and c["compute_only"][field] >= 0, (name, field)
            assert c["first_call_cold_s"] is None and c["first_call_s"] > 0
        assert run["bandwidth_gbs"]["copy"] > 0 and run["fma_peak_gflops_per_core"] > 0
    numexpr = [r for r in data["runs"] if r["system"] == "numexpr"]
    statuses = {c["status"] for r in numexpr for c in r["results"].values()}
    assert statuses <= {"ok", "n/a", "missing"} and statuses
    for title in ("natural use", "compute only", "CPU-s per wall-s",
                  "fp32 FMA peak"):
        assert title in stdout
    for name in ("chain", "softmax", "mlp2", "fork_wait", "masked_row_max_causal"):
        assert name in stdout


MEMORY_BOUND = [w.name for w in SUITE if w.memory_bound]


def test_streaming_roofline_in_json_and_tables(tiny_suite):
    """Every memory-bound workload has GB/s and its share of the copy bandwidth measured in
    the same run (jitcore's child, same thread count), natural use and compute only, for
    every system that ran it; the printed tables and the markdown show them."""
    data, stdout = tiny_suite
    assert {"chain", "broadcast3", "transpose_add", "softmax", "row_sum"} <= set(MEMORY_BOUND)
    assert not BY_NAME["linear_gelu"].memory_bound and not BY_NAME["dispatch_1024"].memory_bound
    for run in data["runs"]:
        jit = next(r for r in data["runs"] if r["system"] == "jitcore"
                   and r["threads"] == run["threads"])
        copy = jit["bandwidth_gbs"]["copy"]
        assert run["copy_gbs"] == copy
        for name, c in run["results"].items():
            for col in (c, c.get("compute_only", {})):
                if name in MEMORY_BOUND and col.get("status") == "ok":
                    gbs = c["bytes"] / col["median_s"] / 1e9
                    assert col["gbs"] == pytest.approx(gbs), (run["system"], name)
                    assert col["copy_fraction"] == pytest.approx(gbs / copy)
                elif name not in MEMORY_BOUND:
                    assert "copy_fraction" not in col, (run["system"], name)
    assert "streaming roofline" in stdout and "% copy" in stdout and "triad" in stdout
    lines = stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("streaming roofline")))
    rows = {line.split()[0] for line in lines[at + 3:at + 3 + len(MEMORY_BOUND)]}
    assert rows == set(MEMORY_BOUND)
    text = markdown.tables(data)
    assert "streaming roofline" in text
    chain_rows = [line for line in text.splitlines() if line.startswith("| chain | ")]
    jit_cell = chain_rows[1].strip("|").split("|")[1]          # the roofline table's row
    assert "%) / " in jit_cell and jit_cell.strip().endswith("%)"), chain_rows


def test_roofline_fractions_of_the_same_thread_count():
    def run(system, threads, median, copy=None, status="ok"):
        cell = {"status": status, "median_s": median, "bytes": 4e9,
                "compute_only": {"status": "ok", "median_s": median / 2}}
        entry = {"system": system, "threads": threads,
                 "results": {"chain": cell, "linear_gelu": dict(cell)}}
        if copy:
            entry["bandwidth_gbs"] = {"copy": copy, "triad": copy / 2}
        return entry
    runs = [run("jitcore", 1, 1.0, copy=8.0), run("numpy", 1, 2.0),
            run("jitcore", 2, 0.5, copy=16.0), run("numpy", 2, 4.0, status="wrong")]
    roofline.add_roofline(runs)
    one, numpy_one, two, numpy_two = (r["results"]["chain"] for r in runs)
    assert one["gbs"] == 4.0 and one["copy_fraction"] == 0.5
    assert one["compute_only"]["gbs"] == 8.0 and one["compute_only"]["copy_fraction"] == 1.0
    assert numpy_one["copy_fraction"] == 0.25                # jitcore's copy at 1 thread
    assert two["copy_fraction"] == 0.5 and "gbs" not in numpy_two
    assert "copy_fraction" not in runs[0]["results"]["linear_gelu"]      # compute-bound
    assert roofline.roofline_text(one) == "4.0 (50%)"
    assert cli.roofline_cell(one) == "4.0 (50%) / 8.0 (100%)"


def test_compute_cell_is_a_share_of_the_peak():
    c = {"status": "ok", "median_s": 0.5, "flops": 100e9,
         "compute_only": {"status": "ok", "median_s": 1.0}}
    assert roofline.compute_cell(c, 400.0) == "200.0 (50%) / 100.0 (25%)"
    assert roofline.compute_cell(c, None) == "200.0 / 100.0"
    assert roofline.compute_cell(dict(c, compute_only={"status": "n/a"}), 400.0) == \
        "200.0 (50%) / -"
    assert roofline.compute_cell({"status": "wrong"}, 400.0) == "wrong"
    assert roofline.fma_peak({"fma_peak_gflops_per_core": 90.0}, 2) == 180.0
    assert roofline.fma_peak({}, 2) is None


def test_bf16_rows_use_the_bf16_peak():
    """bf16 matmul rows are a share of the vdpbf16ps peak where it was measured, else of the
    fp32 FMA peak (no AVX512_BF16: jitcore ran the float32 fallback)."""
    run = {"fma_peak_gflops_per_core": 100.0, "bf16_peak_gflops_per_core": 230.0}
    assert roofline.peak_of(run, 2, "bf16") == 460.0 and roofline.peak_of(run, 2) == 200.0
    assert roofline.peak_of(dict(run, bf16_peak_gflops_per_core=None), 1, "bf16") == 100.0
    assert all(BY_NAME[n].precision == "bf16" and BY_NAME[n].gemm for n in BF16_GEMMS)


def test_bf16_peak_is_measured_where_the_target_has_it():
    """The vdpbf16ps loop does twice the flops of an FMA per instruction: its peak is well
    above the fp32 one (None on a target without AVX512_BF16). Each measurement is a
    timing: the best ratio of three back-to-back pairs, so that a core shared with other
    jobs (seen: 1.15x once in a loaded full suite) does not decide it."""
    from jitcore.llvm import bf16
    from jitcore.targetinfo import select_target
    got = peak.bf16_peak_gflops()
    if not bf16.native(select_target()):
        assert got is None
        return
    ratios = [got / peak.fma_peak_gflops()]
    while max(ratios) <= 1.2 and len(ratios) < 3:
        ratios.append(peak.bf16_peak_gflops() / peak.fma_peak_gflops())
    assert max(ratios) > 1.2, ratios


def test_markdown_tables_have_both_columns(tiny_suite):
    data, _ = tiny_suite
    text = markdown.tables(data)
    assert "| workload | jitcore | numpy |" in text and "natural use / compute only" in text
    chain = next(line for line in text.splitlines() if line.startswith("| chain | "))
    cells = [c.strip() for c in chain.strip("|").split("|")][1:]
    jit, numpy = cells[0], cells[1]
    assert " / " in jit and numpy.count("(1.00x)") == 2            # numpy: 1.00x in both
    # every other system has both columns, or says it is missing / not applicable
    assert all(" / " in c or c in ("missing", "n/a") for c in cells[2:]), cells
    assert "first call (build + first call, compile included)" in text


CONV_ROWS = ("conv3x3_64", "conv1x1_64_256", "conv3x3_256", "conv7x7s2_stem", "dwconv3x3_96",
             "conv_bn_relu", "resblock")


def test_compute_roofline_of_conv_rows(tiny_suite):
    """Every convolution (and matmul) row has GFLOP/s and its share of the FMA peak measured
    by jitcore's child at the same thread count, for every system that ran it, in the printed
    tables and the markdown; pool rows are timed, not in the GFLOP/s table."""
    data, stdout = tiny_suite
    assert all(BY_NAME[n].gemm and BY_NAME[n].flops for n in CONV_ROWS)
    assert "compute roofline" in stdout
    text = markdown.tables(data)
    for threads in (1, 2):
        jit = next(r for r in data["runs"] if r["system"] == "jitcore"
                   and r["threads"] == threads)
        peak = jit["fma_peak_gflops_per_core"] * threads
        assert roofline.fma_peak(jit, threads) == pytest.approx(peak)
        title = next(line for line in text.splitlines()
                     if line.startswith(f"{threads} thread(s): GFLOP/s (% of the"))
        assert f"{peak:.0f} GFLOP/s fp32 FMA peak of {threads} core(s)" in title
        block = text.split(title, 1)[1].split("\n\n", 2)[1].splitlines()
        rows = {line.split("|")[1].strip(): line for line in block[2:]}
        assert set(CONV_ROWS) <= set(rows) and "max_pool_3x3s2" not in rows
        for n in CONV_ROWS:
            c = jit["results"][n]
            gflops = c["flops"] / c["median_s"] / 1e9
            want = f"{gflops:.1f} ({gflops / peak:.0%}) / "
            assert rows[n].split("|")[2].strip().startswith(want), (n, rows[n], want)
    for n in ("max_pool_3x3s2", "avg_pool_2x2", "global_avg_pool"):
        assert any(line.startswith(f"| {n} (us) | ") for line in text.splitlines())


def test_no_cold_runs_say_warm_only(tiny_suite):
    """--no-cold: the first-call tables say warm cache only, and show one figure per cell."""
    data, stdout = tiny_suite
    assert data["cold"] is False and cli.cold_measured(data) is False
    text = markdown.tables(data)
    for out in (stdout, text):
        assert "cold cache / warm cache" not in out and "warm cache (no cold-cache child" in out
    jit = next(r for r in data["runs"] if r["system"] == "jitcore")
    assert cli.first_call_cell(jit["results"]["chain"], cold=False) == \
        cli.fmt_seconds(jit["results"]["chain"]["first_call_s"])
    first = text.split("warm cache (no cold-cache child: --no-cold)", 1)[1]
    chain = next(line for line in first.splitlines() if line.startswith("| chain | "))
    assert " / " not in chain


def test_children_are_pinned_and_interop_bounded(tiny_suite):
    data, _ = tiny_suite
    allowed = sorted(os.sched_getaffinity(0))
    for run in data["runs"]:
        if all(c.get("status") == "missing" for c in run["results"].values()):
            continue                    # a peer that is not installed starts no child
        want = allowed[:run["threads"]]
        assert run["cores"] == want and run["affinity"] == want, run
    one = next(r for r in data["runs"] if r["system"] == "jitcore" and r["threads"] == 1)
    assert one["interop_threads"] == 1
    # one core: the fork runs on it too, so at most ~1 CPU-second per wall-second
    assert one["results"]["fork_wait"]["cpu_per_wall"] <= 1.2


def test_runs_are_interleaved_and_aggregated(tmp_path):
    """Two runs, the system order rotated; the first run adds cold-cache children."""
    data, stdout = run_cli(tmp_path, "--threads", "1", "--systems", "jitcore,numpy",
                           "--only", "chain,fork_wait", "--runs", "2")
    assert data["runs_count"] == 2
    assert [(r["run"], r["system"]) for r in data["raw"]] == \
        [(0, "jitcore"), (0, "numpy"), (1, "numpy"), (1, "jitcore")]
    for run in data["runs"]:
        for c in run["results"].values():
            lo, hi = c["spread_s"]
            assert len(c["per_run_s"]) == 2 and lo <= c["median_s"] <= hi
            assert c["first_call_cold_s"] > 0 and c["first_call_s"] > 0
    jit = next(r for r in data["runs"] if r["system"] == "jitcore")
    # the cold child compiles with LLVM; the warm one loads the machine code it left on disk
    assert jit["results"]["fork_wait"]["first_call_cold_s"] > \
        jit["results"]["fork_wait"]["first_call_s"]
    assert "±" in stdout and "cold cache / warm cache" in stdout
    assert data["cold"] is True and "cold cache / warm cache" in markdown.tables(data)


def test_merge_takes_medians_and_spreads():
    def report(median, status="ok"):
        cell = {"status": status, "median_s": median, "min_s": median / 2, "cpu_per_wall": 1.0,
                "sys_s_per_call": 0.0, "minflt_per_call": median * 10, "first_call_s": 0.5,
                "bytes": 100, "max_error": 0.1,
                "compute_only": {"status": "n/a"}}
        return {"results": {"chain": cell}, "cores": [0]}
    merged = cli.merge_runs("numpy", 1, ["chain"], [report(3.0), report(1.0), report(2.0)],
                            {"results": {"chain": {"status": "ok", "first_call_s": 0.9}}})
    c = merged["results"]["chain"]
    assert c["median_s"] == 2.0 and c["spread_s"] == [1.0, 3.0] and c["minflt_per_call"] == 20
    assert c["per_run_s"] == [3.0, 1.0, 2.0] and c["first_call_cold_s"] == 0.9
    assert c["gbs"] == pytest.approx(100 / 2.0 / 1e9) and c["compute_only"]["status"] == "n/a"
    bad = cli.merge_runs("numpy", 1, ["chain"], [report(1.0), report(1.0, "wrong")], None)
    assert bad["results"]["chain"]["status"] == "wrong"


@pytest.mark.parametrize("broken", ["natural", "into", "into_not_out"])
def test_wrong_peer_answer_is_reported(broken):
    """A peer whose answer is off (or whose out= variant never writes the output) is wrong."""
    w = BY_NAME["chain"]

    def calls_for(name, args, out):
        a, b, c = args
        good = lambda: np.maximum(a * b + c, 0) * np.float32(0.5)           # noqa: E731
        bad = lambda: good() * np.float32(1.01)                             # noqa: E731

        def into():
            if broken == "into_not_out":
                return good()              # right values, but not in the preallocated output
            np.copyto(out, bad() if broken == "into" else good())
            return out
        return (bad if broken == "natural" else good), into
    c = child.run_one(w, calls_for, tiny=True, repeat=2)
    if broken == "natural":
        assert c["status"] == "wrong" and "tolerance" in c["error"]
    else:
        assert c["status"] == "ok" and c["compute_only"]["status"] == "wrong"


def test_missing_peer_is_reported(monkeypatch, capsys):
    monkeypatch.setitem(cli.SYSTEM_MODULES, "numba", "no_such_module_for_jitcore_tests")
    opts = cli.parse(["--tiny", "--only", "chain", "--systems", "numba",
                      "--threads", "1", "--no-cold"])
    data = cli.run_suite(opts.names, opts.systems_list, opts.threads_list, opts)
    cli.print_tables(data)
    numba = next(r for r in data["runs"] if r["system"] == "numba")
    assert numba["results"]["chain"]["status"] == "missing"
    assert "not installed: numba" in capsys.readouterr().out


def test_unknown_names_are_refused():
    proc = subprocess.run([sys.executable, "-m", "jitcore", "bench", "--only", "nope"],
                          capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 2 and "unknown: nope" in proc.stderr


@pytest.mark.parametrize("system", ["onnxruntime", "openvino"])
def test_runtimes_run_the_cnn_layer_rows(tmp_path, system):
    """ONNX Runtime and OpenVINO as peers of the CNN layer rows: each layer exported with its
    weights, checked against the float64 reference like every system; n/a elsewhere."""
    pytest.importorskip("torch")
    pytest.importorskip(system)
    data, out = run_cli(tmp_path, "--only", "conv3x3_64,max_pool_3x3s2,chain",
                        "--threads", "1", "--systems", f"jitcore,{system}", "--no-cold")
    run = next(r for r in data["runs"] if r["system"] == system)
    for name in ("conv3x3_64", "max_pool_3x3s2"):
        assert run["results"][name]["status"] == "ok", (name, run["results"][name])
        assert run["results"][name]["compute_only"]["status"] == "n/a"
    assert run["results"]["chain"]["status"] == "n/a"
    assert system in out


def test_target_holds_jitcore_and_the_peers_to_the_level(tmp_path):
    """--target: jitcore's child builds for the level, numpy's and torch's switches are set
    to it, and the results record the level and the variables."""
    import jitcore as jc
    from jitcore.bench import levels
    if not jc.target_info()["triple"].startswith("x86_64"):
        pytest.skip("x86-64 levels")
    data, out = run_cli(tmp_path, "--only", "chain", "--threads", "1", "--systems",
                        "jitcore,numpy", "--no-cold", "--target", "x86-64-v2")
    assert data["machine"]["target"] == "x86-64-v2" and "target x86-64-v2" in out
    env = data["machine"]["restriction"]["env"]
    assert env["JITCORE_TARGET"] == "x86-64-v2" and env["ATEN_CPU_CAPABILITY"] == "default"
    dispatch, _ = levels.numpy_dispatch()
    assert set(env.get("NPY_DISABLE_CPU_FEATURES", "").split()) == \
        {t for t in dispatch if levels.NUMPY_TARGET_RANK.get(t, 99) > 2}
    jit_report = next(r for r in data["raw"] if r["system"] == "jitcore")
    assert jit_report["target"] == "x86-64-v2"
    assert jit_report["results"]["chain"]["status"] == "ok"


def test_a_target_the_host_cannot_run_is_refused():
    import jitcore as jc
    above = [n for n in ("x86-64-v4", "x86-64-v3") if not _runs(jc, n)]
    if not above:
        pytest.skip("the host runs every level")
    proc = subprocess.run([sys.executable, "-m", "jitcore", "bench", "--target", above[0]],
                          capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 2 and "needs CPU features this host lacks" in proc.stderr


def _runs(jc, level: str) -> bool:
    try:
        jc.target_info(target=level)
        return True
    except jc.TargetError:
        return False
