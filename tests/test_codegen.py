"""The LLVM side: explicit vector types in the IR, matching registers in the asm, width
overrides (API and environment), dumps, and target info."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, WIDTHS, assert_close, assert_same, f64

HOST_BITS = jc.target_info()["max_vector_bits"]      # what the CPU has
DEFAULT_BITS = jc.target_info()["vector_bits"]       # what a plain jc.jit uses (env may cap it)
X86 = jc.target_info()["triple"].startswith("x86_64")
default_avx512 = pytest.mark.skipif(not (X86 and DEFAULT_BITS >= 512),
                                    reason="the default width is below 512 bits")
needs_avx2 = pytest.mark.skipif(not (X86 and HOST_BITS >= 256), reason="needs AVX2")


def chain(a, b, c):
    return jc.relu(a * b + c) * 0.5


ARGS = [jc.spec((4097,), jc.float32)] * 3


def _registers(asm: str) -> set:
    return set(re.findall(r"%([xyz]mm)\d+", asm))


@default_avx512
def test_avx512_float32_uses_16_lanes_and_zmm():
    f = jc.jit(chain)
    assert "<16 x float>" in f.llvm_ir(*ARGS)
    assert "<16 x float>" in f.llvm_ir(*ARGS, optimized=False)
    assert "zmm" in _registers(f.asm(*ARGS))


@needs_avx2
def test_width_256_uses_8_lanes_and_ymm_only():
    f = jc.jit(chain, vector_width=256)
    assert "<8 x float>" in f.llvm_ir(*ARGS)
    assert "<16 x float>" not in f.llvm_ir(*ARGS)
    regs = _registers(f.asm(*ARGS))
    assert "ymm" in regs and "zmm" not in regs


@needs_avx2
def test_env_var_sets_the_width_in_a_fresh_process():
    code = ("import jitcore as jc, re\n"
            "f = jc.jit(lambda a, b: a * b + 1.0)\n"
            "s = jc.spec((4097,), jc.float32)\n"
            "print(jc.target_info()['vector_bits'], '<8 x float>' in f.llvm_ir(s, s),\n"
            "      sorted(set(re.findall(r'%([xyz]mm)', f.asm(s, s)))))\n")
    env = dict(os.environ, JITCORE_VECTOR_WIDTH="256")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "256" and out[1] == "True"
    assert "'zmm']" not in out[-1] and "'zmm'," not in " ".join(out)


def test_width_128_uses_4_lanes():
    f = jc.jit(chain, vector_width=128)
    assert "<4 x float>" in f.llvm_ir(*ARGS)
    if X86:
        assert _registers(f.asm(*ARGS)) <= {"xmm"}


def test_float64_lanes_are_half_of_float32():
    f = jc.jit(chain)
    s = [jc.spec((1000,), jc.float64)] * 3
    lanes = DEFAULT_BITS // 64
    assert f"<{lanes} x double>" in f.llvm_ir(*s)


def test_invalid_width_is_a_clear_error():
    with pytest.raises(jc.JitcoreError, match="128, 256, 512"):
        jc.jit(chain, vector_width=300)


@pytest.mark.skipif(HOST_BITS >= 512, reason="only meaningful below AVX-512")
def test_width_above_the_cpu_is_lowered():
    with pytest.warns(RuntimeWarning):
        f = jc.jit(chain, vector_width=512)
    assert "<16 x float>" not in f.llvm_ir(*ARGS)


def test_results_are_identical_across_widths():
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(4097).astype(np.float32) for _ in range(3))
    x, y, z = f64(a), f64(b), f64(c)
    ref = jc.jit(chain, vector_width=128)(a, b, c)
    # numpy's values (a*b + c may be fused: errors relative to |a*b| + |c|) ...
    assert_close(ref, np.maximum(x * y + z, 0) * 0.5, F32, scale=(np.abs(x * y) + np.abs(z)) / 2)
    for bits in WIDTHS:                  # ... and the same bits at every width
        assert_same(jc.jit(chain, vector_width=bits)(a, b, c), ref)


def test_dump_dir_writes_every_stage(tmp_path):
    from jitcore import config
    with config.override(dump_dir=str(tmp_path)):
        f = jc.jit(lambda a: a * 3.0 + 1.0)
        f(np.ones(33, np.float32))
    names = sorted(os.listdir(tmp_path))
    for ext in ("graph.txt", "kernels.txt", "ll", "opt.ll", "s"):
        assert any(n.endswith("." + ext) for n in names), (ext, names)
    ll = next(n for n in names if n.endswith(".opt.ll"))
    assert "define" in (tmp_path / ll).read_text()


def test_target_info_reports_cpu_features_and_width():
    info = jc.target_info()
    assert info["vector_bits"] in (128, 256, 512) and info["cpu"]
    assert isinstance(info["features"], list) and info["brand"]
    assert info["lanes"]["float32"] == info["vector_bits"] // 32


def test_one_native_entry_per_graph():
    f = jc.jit(lambda a: (a.sum(axis=1), jc.exp(a) * 2.0))
    ir_text = f.llvm_ir(jc.spec((8, 100), jc.float32), optimized=False)
    exported = [ln for ln in ir_text.splitlines()
                if ln.startswith("define") and "internal" not in ln]
    # <graph>_run and <graph>_entry, and each kernel in a module of its own, named by content
    graph_fns = [ln for ln in exported if "@\"jc_" in ln]
    kernel_fns = [ln for ln in exported if "@\"jck_" in ln]
    assert len(graph_fns) == 2 and len(kernel_fns) == 2 and len(exported) == 4, exported
