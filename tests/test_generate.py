"""A tiny LLaMA (transformers' LlamaConfig, random weights) generating greedily with a KV
cache (jitcore/bench/decoder.py): the decode step compiled once with dynamic=True serves
every cache length, its tokens are eager's and transformers' own generate's, its logits
within 2e-6 (normwise) of the float64 step's, and the cache is written in place, read
without copies. A step that writes its cache input itself is refused with advice.
"""
import copy
import tracemalloc

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import jitcore as jc  # noqa: E402
import jitcore.torch as jt  # noqa: E402
from jitcore.bench import decoder  # noqa: E402

PROMPT, NEW = 5, 40                 # cache lengths 5..44: around every vector width


@pytest.fixture(scope="module")
def model():
    lm = decoder.build(decoder.TINY)
    prefill, step = decoder.Prefill(lm).eval(), decoder.Step(lm).eval()
    cache = decoder.KVCache.empty(lm, 8)
    cache.length = 8
    compiled = jt.compile(step, torch.tensor([[3]]), torch.tensor([[8]]), *cache.prefix(),
                          dynamic=True)
    return lm, prefill, step, compiled


def test_one_compile_generates_eager_tokens(model):
    lm, prefill, step, compiled = model
    prompt = torch.randint(0, lm.config.vocab_size, (1, PROMPT),
                           generator=torch.Generator().manual_seed(1))
    before = jc.cache_info()["compiles"]
    got = decoder.generate(prefill, compiled, lm, prompt, NEW, keep_logits=True)
    assert jc.cache_info()["compiles"] == before          # one compile, every length
    assert not compiled.fallbacks
    eager = decoder.generate(prefill, step, lm, prompt, NEW)
    assert got.tokens == eager.tokens
    with torch.no_grad():
        hf = lm.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    assert got.tokens == hf[0, PROMPT:].tolist()           # the step is LLaMA's attention
    lm64 = copy.deepcopy(lm).double()
    ref = decoder.generate(decoder.Prefill(lm64), decoder.Step(lm64), lm64, prompt, NEW,
                           keep_logits=True,
                           cache=decoder.KVCache.empty(lm64, PROMPT + NEW, dtype=torch.float64))
    assert ref.tokens == got.tokens
    err = max(float((g.double() - r).norm() / r.norm()) for g, r in zip(got.logits, ref.logits))
    assert err < 2e-6, err                                 # measured 2.3e-7 (eager: 2.4e-7)


def test_multi_head_attention_decodes_with_one_compile():
    """kv heads = query heads (GPT-2's, OPT's attention): the step's scores and weighted sum
    are matrix-vector products along the run-time cache length; one compile serves every
    token (it compiled per token, ~0.7 s each, before GEMVs read run-time extents)."""
    lm = decoder.build(dict(decoder.TINY, num_key_value_heads=4))
    prefill, step = decoder.Prefill(lm).eval(), decoder.Step(lm).eval()
    cache = decoder.KVCache.empty(lm, 8)
    cache.length = 8
    compiled = jt.compile(step, torch.tensor([[3]]), torch.tensor([[8]]), *cache.prefix(),
                          dynamic=True)
    prompt = torch.tensor([[5, 9, 2]])
    before = jc.cache_info()["compiles"]
    got = decoder.generate(prefill, compiled, lm, prompt, 12)
    assert jc.cache_info()["compiles"] == before
    assert got.tokens == decoder.generate(prefill, step, lm, prompt, 12).tokens


def test_cache_is_written_in_place_and_read_without_copies(model):
    lm, prefill, _, compiled = model
    cache = decoder.KVCache.empty(lm, 256)
    pointers = [t.data_ptr() for t in cache.tensors]
    decoder.generate(prefill, compiled, lm, torch.tensor([[1, 2, 3]]), 4, cache=cache)
    assert [t.data_ptr() for t in cache.tensors] == pointers
    cache.length = 240                                     # a long prefix: 4 x 30 KB
    prefix_bytes = sum(t.nbytes for t in cache.prefix())
    ids, pos = torch.tensor([[5]]), torch.tensor([[240]])
    compiled(ids, pos, *cache.prefix())                    # (warm: output buffers)
    tracemalloc.start()
    try:
        with torch.inference_mode():
            compiled(ids, pos, *cache.prefix())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < prefix_bytes / 8, (peak, prefix_bytes)   # no copy of the prefix (numpy's)
    assert [t.data_ptr() for t in cache.tensors] == pointers


class WritesItsCache(torch.nn.Module):
    """A step that updates its cache input itself (transformers' StaticCache's index_copy_)."""

    def forward(self, x, cache, pos):
        cache.index_copy_(0, pos, x)
        return cache.sum(0)


def test_a_step_writing_its_cache_input_is_refused_with_advice():
    with pytest.raises(TypeError) as info:
        jt.compile(WritesItsCache(), torch.ones(1, 4), torch.zeros(8, 4), torch.tensor([2]),
                   dynamic=True)
    message = str(info.value)
    assert "writes its input 'cache' in place" in message and "KV cache" in message


def test_bench_generate_command(tmp_path, capsys, monkeypatch):
    """`python -m jitcore bench --generate` end to end on the tiny model (one layer: the
    exports take most of the time; jitcore and eager): a table with tokens per second, a
    stamped JSON, exit status 0 (jitcore's tokens are eager's)."""
    from jitcore.bench import generate_suite
    monkeypatch.setitem(decoder.TINY, "num_hidden_layers", 1)
    path = tmp_path / "generate.json"
    status = generate_suite.main(["--tiny", "--systems", "jitcore,torch", "--tokens", "6",
                                  "--prompt", "4", "--rounds", "1", "--json", str(path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| jitcore |" in out and "jitcore / best peer (torch)" in out
    import json
    data = json.loads(path.read_text())
    assert data["stamp"]["cpu"]["model"] and data["stamp"]["settings"]["systems"]
    cell = data["results"]["1"]["jitcore"]
    assert cell["tokens_match_eager"] and cell["tokens_per_s"] > 0
