"""`python -m jitcore bench --models` in its tiny mode: children pinned per system and thread
count, each model checked against eager torch (normwise relative error), timed, with jitcore's
fallback count; table, JSON and the geometric mean come out. Also the models themselves: the
benchmark's own ResNet-18 and MobileNetV2 run and jitcore.torch matches them."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")


def test_models_cli_tiny(tmp_path):
    out = tmp_path / "models.json"
    proc = subprocess.run([sys.executable, "-m", "jitcore", "bench", "--models", "--tiny",
                           "--only", "mlp", "--systems", "jitcore,torch", "--threads", "1",
                           "--no-cold", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["models"] == ["mlp"]
    cells = {r["system"]: r["results"]["mlp"] for r in data["runs"]}
    assert set(cells) == {"jitcore", "torch"}
    jit = cells["jitcore"]
    assert jit["status"] == "ok" and jit["rel_error"] <= 1e-4 and jit["fallbacks"] == 0
    assert jit["median_s"] > 0 and jit["first_call_s"] > 0
    assert cells["torch"]["rel_error"] == 0.0
    assert "latency, median ms" in proc.stdout and "geomean speedup over eager" in proc.stdout


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_benchmark_cnns_match_eager_through_jitcore(name):
    import jitcore.torch as jt
    from jitcore.bench.models import build
    module, inputs = build(name, tiny=True)
    c = jt.compile(module, *inputs)
    with torch.inference_mode():
        want = module(*inputs)
    got = c(*inputs)
    assert got.shape == want.shape
    assert float((got - want).norm() / want.norm()) <= 1e-4
