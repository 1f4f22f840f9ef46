"""The one source fingerprint (jitcore/cache/fingerprint.py) that every disk cache layer is keyed by:
a change to the sources a layer's entries depend on gives that layer new keys, and only the
layers that depend on them."""
from __future__ import annotations

from pathlib import Path

import pytest

from jitcore.cache import disk as diskcache
from jitcore.cache import fingerprint as fp
from jitcore.llvm import engine
from jitcore.targetinfo import select_target

ROOT = Path(__file__).resolve().parents[1]
TARGET = select_target().key()


@pytest.fixture(autouse=True)
def fresh_fingerprints():
    fp.fingerprint.cache_clear()
    yield
    fp.fingerprint.cache_clear()


def layer_keys() -> dict:
    """One key of each disk cache layer."""
    return {"module object": diskcache.Entry("define void @f() { ret void }", TARGET, ["f"]).key,
            "kernel IR": diskcache.KernelIR(TARGET)._key(("kernel",)),
            "graph manifest": diskcache.GraphEntry(("graph",), TARGET).key,
            "module recipe": diskcache.ModuleRecipe(("pool",), TARGET).key}


def edited(monkeypatch, tmp_path, module: str):
    """Pretend the source of `module` changed: a scope naming it (or its package) reads one
    more file."""
    extra = tmp_path / "edit.py"
    extra.write_text("# an edit\n")
    files = fp._source_files

    def with_edit(scope):
        hit = any(module == name or module.startswith(name + ".") for name in scope)
        return files(scope) + ([("edit.py", str(extra))] if hit else [])
    monkeypatch.setattr(fp, "_source_files", with_edit)


@pytest.mark.parametrize("module, changed", [
    ("jitcore.llvm.engine", {"module object", "kernel IR", "graph manifest", "module recipe"}),
    ("jitcore.passes.simplify", {"kernel IR", "graph manifest", "module recipe"}),
    ("jitcore.compiler", {"graph manifest"}),
    ("jitcore.api", set()),
])
def test_an_edit_renews_the_keys_of_the_layers_that_depend_on_it(monkeypatch, tmp_path,
                                                                  module, changed):
    before = layer_keys()
    fp.fingerprint.cache_clear()
    edited(monkeypatch, tmp_path, module)
    after = layer_keys()
    assert {layer for layer in before if before[layer] != after[layer]} == changed


def test_versions_and_target_are_in_every_key(monkeypatch):
    before = layer_keys()
    fp.fingerprint.cache_clear()
    monkeypatch.setattr(fp.llvmlite, "__version__", "0.0.0-test")
    assert all(a != b for a, b in zip(before.values(), layer_keys().values()))
    other = TARGET + ("another",)
    assert fp.fingerprint(fp.ENGINE, other) != fp.fingerprint(fp.ENGINE, TARGET)


def test_the_scopes_cover_the_sources():
    names = {name for name, _ in fp._source_files(fp.DRIVER)}
    assert {"jitcore.compiler", "jitcore.cache.disk", "engine.py", "codegen.py"} <= names
    assert len(fp._source_files(fp.BACKEND)) < len(fp._source_files(fp.DRIVER))
    # the engine's files (the pipelines and one module's build are machine_code's), in the
    # checkout or in an installed copy (where CI runs)
    from jitcore.llvm import machine_code
    assert [path for _, path in fp._source_files(fp.ENGINE)] == \
        [engine.__file__, machine_code.__file__]


def test_only_the_fingerprint_reads_versions_or_hashes_sources():
    """No other front module keys a cache by library versions or its own source files."""
    for path in sorted((ROOT / "jitcore").rglob("*.py")):
        if path.name == "fingerprint.py" or "llvm" in path.relative_to(ROOT).parts:
            continue
        text = path.read_text()
        for needle in ("llvmlite.__version__", "llvm_version_info", "_fingerprint("):
            assert needle not in text, f"{path.relative_to(ROOT)} uses {needle}"
