"""The model zoo (`python -m jitcore bench --zoo`) in CI's tiny configuration: every
architecture's table entry is well formed; an encoder (RoBERTa: its token-type ids take
aten.gather), a decoder (LLaMA) and a CNN (ResNet) built tiny by the zoo's builder compile
through jitcore.torch with no fallback node and pass the zoo's check (normwise error against
the float64 eager output within PASS_ERROR); and the command runs one model end to end."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import jitcore.torch as jt                          # noqa: E402
from jitcore.bench import zoo, zoo_suite           # noqa: E402
from jitcore.bench.model_child import rel_error     # noqa: E402

FAMILIES = {"encoder", "decoder", "vision transformer", "CNN", "speech"}


def test_the_zoo_covers_every_family():
    assert len(zoo.ARCHS) >= 30 and len(zoo.BY_NAME) == len(zoo.ARCHS)
    assert {a.family for a in zoo.ARCHS} == FAMILIES
    assert {a.inputs for a in zoo.ARCHS} == {"text", "image", "features", "audio"}


def test_depth_is_capped_per_stage_and_full_keeps_it():
    resnet = zoo.BY_NAME["resnet"]
    assert list(zoo.config(resnet, 2).depths) == [2, 2, 2, 2]
    assert list(zoo.config(resnet, None).depths) == [3, 4, 6, 3]
    assert zoo.config(zoo.BY_NAME["bert"], 2).num_hidden_layers == 2
    assert zoo.config(zoo.BY_NAME["bert"], None).num_hidden_layers == 12


@pytest.mark.parametrize("name", ["roberta", "llama", "resnet"])
def test_tiny_zoo_model_passes_in_jitcore(name):
    module, inputs = zoo.build(name, layers=2, tiny=True)
    want = zoo.reference(module, inputs)
    assert want.dtype == torch.float64
    c = jt.compile(module, *inputs)
    assert c.fallbacks == [], c.explain()
    with torch.inference_mode():
        got = c(*inputs)
    assert got.shape == want.shape
    assert rel_error(got, want) <= zoo_suite.PASS_ERROR


def test_zoo_command_tiny(tmp_path):
    out = tmp_path / "zoo.json"
    proc = subprocess.run([sys.executable, "-m", "jitcore", "bench", "--zoo", "--tiny",
                           "--only", "gpt2", "--systems", "jitcore", "--repeat", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    cells = {r["system"]: r["results"]["gpt2"] for r in data["runs"]}
    assert set(cells) == {"jitcore", "torch"}          # eager always runs: the baseline
    jit = cells["jitcore"]
    assert jit["status"] == "ok" and jit["fallbacks"] == 0 and jit["fallback_reasons"] == []
    assert jit["rel_error"] <= zoo_suite.PASS_ERROR and jit["median_s"] > 0
    assert 0 < cells["torch"]["rel_error"] <= zoo_suite.PASS_ERROR    # float32 vs float64
    assert data["summary"][0]["passed"] == 1 and data["families"] == {"gpt2": "decoder"}
    assert "jitcore passes 1/1 (100%" in proc.stdout
    assert data["stamp"]["settings"]["command"].startswith("python -m jitcore bench --zoo")
