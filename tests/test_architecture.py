"""The architecture, checked: imports read with `ast` from every module of the four packages
(imports inside functions count too), and the packaging that gives them one installed name.

Rules:
  - no import cycle anywhere;
  - `jitcore.ir` imports none of the other three packages;
  - `jitcore.passes` imports only `jitcore.ir`;
  - `jitcore.runtime` imports none of `ir`, `passes`, `jitcore` (it knows no tensors);
  - `jitcore.llvm` (the backend) imports `ir`, `passes`, `runtime` and itself, not the front;
  - the front (the rest of `jitcore/`) is layered: a module imports only its own layer or
    the ones below (FRONT_LAYERS). A new module must be placed in a layer here.
"""
from __future__ import annotations

import ast
import importlib.metadata
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# source folder -> installed package name (pyproject's package-dir)
PACKAGES = {"jitcore": "jitcore", "ir": "jitcore.ir", "passes": "jitcore.passes",
            "runtime": "jitcore.runtime"}

# The front of jitcore/, bottom up. `jitcore` is the package's __init__ (the public names).
FRONT_LAYERS = [
    ("settings, version, log, caches",
     {"jitcore.version", "jitcore.config", "jitcore.source_layout", "jitcore.log",
      "jitcore.cache", "jitcore.gcpause"}),
    ("target selection", {"jitcore.targetinfo"}),
    ("tracing and the op namespace", {"jitcore.ops"}),
    ("compile driver, caches and the thread pools",
     {"jitcore.explain", "jitcore.dump", "jitcore.perfmap", "jitcore.parallel",
      "jitcore.compiler", "jitcore.threadpool_control"}),
    ("call path", {"jitcore.call"}),
    ("public API", {"jitcore.api", "jitcore.futures", "jitcore.eager", "jitcore.pickling",
                    "jitcore"}),
    ("PyTorch front (optional: `import jitcore` never imports it)", {"jitcore.torch"}),
    ("CLI, profiler and benchmark suite", {"jitcore.__main__", "jitcore.profile_cli",
                                           "jitcore.bench"}),
]


def module_files() -> dict:
    """Installed module name -> source file, for every module of the four packages."""
    mods = {}
    for folder, name in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [name, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def imports_of(module: str, path: Path, known: dict) -> dict:
    """{imported module: (line, imported name)} for the imports of one module that land in the
    four packages. `from pkg import sub` counts as importing `pkg.sub` when it is a module."""
    is_package = path.name == "__init__.py"
    edges = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            pairs = [(a.name, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[:len(module.split(".")) - node.level + is_package]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            pairs = [(target, a.name) for a in node.names]
        else:
            continue
        for target, name in pairs:
            for candidate in (f"{target}.{name}", target):
                if candidate in known and candidate != module:
                    edges.setdefault(candidate, (node.lineno, name))
                    break
    return edges


@pytest.fixture(scope="module")
def graph() -> dict:
    known = module_files()
    return {m: imports_of(m, p, known) for m, p in known.items()}


def find_cycle(graph: dict) -> list | None:
    """One import cycle as [a, b, ..., a], or None."""
    state = {}

    def visit(m, stack):
        state[m] = "open"
        stack.append(m)
        for dep in graph[m]:
            if state.get(dep) == "open":
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep, stack)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in sorted(graph):
        if m not in state:
            found = visit(m, [])
            if found:
                return found
    return None


def describe_cycle(graph: dict, cycle: list) -> str:
    return "import cycle: " + "; ".join(
        f"{a} imports {graph[a][b][1]!r} from {b} (line {graph[a][b][0]})"
        for a, b in zip(cycle, cycle[1:]))


def package_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("ir", "passes", "runtime", "llvm"):
        return "jitcore." + parts[1]
    return "front"


ALLOWED = {
    "jitcore.ir": {"jitcore.ir"},
    "jitcore.passes": {"jitcore.passes", "jitcore.ir"},
    "jitcore.runtime": {"jitcore.runtime"},
    "jitcore.llvm": {"jitcore.llvm", "jitcore.ir", "jitcore.passes", "jitcore.runtime"},
}


def layer_of(module: str) -> int | None:
    for k, (_, members) in enumerate(FRONT_LAYERS):
        if module in members or any(module.startswith(m + ".") for m in members
                                    if m != "jitcore"):
            return k
    return None


def rule_violations(graph: dict) -> list:
    """Messages for every arrow that breaks the package rules or the front's layering."""
    bad = []
    for src, deps in sorted(graph.items()):
        for dst, (line, name) in sorted(deps.items()):
            where = f"{src} imports {name!r} from {dst} (line {line})"
            allowed = ALLOWED.get(package_of(src))
            if allowed is not None and package_of(dst) not in allowed:
                bad.append(f"{where}: {package_of(src)} may import only {sorted(allowed)}")
            if package_of(src) == package_of(dst) == "front":
                ls, ld = layer_of(src), layer_of(dst)
                if ls is not None and ld is not None and ld > ls:
                    bad.append(f"{where}: layer '{FRONT_LAYERS[ls][0]}' may not import the "
                               f"layer above it, '{FRONT_LAYERS[ld][0]}'")
    return bad


def test_no_import_cycles(graph):
    cycle = find_cycle(graph)
    assert cycle is None, describe_cycle(graph, cycle)


def test_package_rules_and_front_layers(graph):
    bad = rule_violations(graph)
    assert not bad, "\n".join(bad)


def test_every_front_module_has_a_layer(graph):
    unplaced = [m for m in graph if package_of(m) == "front" and layer_of(m) is None]
    assert not unplaced, f"place these modules in FRONT_LAYERS (tests/test_architecture.py): " \
                         f"{unplaced}"


def test_the_checks_catch_a_cycle_and_a_broken_rule(graph):
    """The checks above fail when an arrow is added by hand."""
    broken = {m: dict(deps) for m, deps in graph.items()}
    broken["jitcore.ir.graph"]["jitcore.api"] = (1, "jit")      # ir -> front, and a circle
    assert find_cycle(broken) is not None
    assert "jitcore.ir may import only ['jitcore.ir']" in "\n".join(rule_violations(broken))
    broken = {m: dict(deps) for m, deps in graph.items()}
    broken["jitcore.ops.tracer"]["jitcore.compiler"] = (1, "compile_graph")   # upward in the front
    assert any("may not import the layer above" in v for v in rule_violations(broken))


def test_one_installed_top_level_name():
    """pyproject installs every package folder, all under `jitcore`; an installed copy's
    metadata names one top-level package."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    assert all(p == "jitcore" or p.startswith("jitcore.") for p in listed), listed
    folders = {p.parent for p in ROOT.glob("*/**/__init__.py")} & {
        p.parent for f in PACKAGES for p in (ROOT / f).rglob("__init__.py")}
    expected = {PACKAGES[d.relative_to(ROOT).parts[0]]
                + "".join("." + part for part in d.relative_to(ROOT).parts[1:])
                for d in folders}
    assert listed == expected, f"pyproject packages {sorted(listed)} != folders {sorted(expected)}"
    try:
        top = importlib.metadata.distribution("jitcore").read_text("top_level.txt")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("jitcore is not installed (source checkout)")
    if top is not None:
        assert top.split() == ["jitcore"], top


def test_errors_show_their_public_path():
    import traceback

    import numpy as np

    import jitcore as jc
    for error in (jc.JitcoreError, jc.ShapeError, jc.DTypeError, jc.TraceError, jc.CompileError):
        assert f"{error.__module__}.{error.__qualname__}" == f"jitcore.{error.__name__}"
    with pytest.raises(jc.ShapeError) as info:
        jc.reshape(np.ones(4), (3,))
    shown = traceback.format_exception_only(info.type, info.value)[-1]
    assert shown.startswith("jitcore.ShapeError: reshape"), shown


# -- the call path is chosen in one place (issue 28) -------------------------------------------
# jitcore/call/choice.py decides which path a call takes (native fast call, ctypes entry,
# Python slow path) from the import-time interpreter checks and the fast call's limits; no
# other front module reads them, so the rules stay in one readable place. (The backend,
# jitcore/llvm/, defines the limits and applies them when it emits the fast call.)
CHOOSER = "jitcore.call.choice"
PATH_DECIDING_NAMES = {"NATIVE_LAYOUT_OK", "NATIVE_EMPTY_OK", "FASTCALL_MAX_INPUTS",
                       "fastcall_eligible"}


def path_deciding_reads(source: str) -> list:
    """(line, name) of each use of a PATH_DECIDING_NAMES name in a module's source (a name,
    an attribute or an imported name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.ImportFrom):
            found += [(node.lineno, a.name) for a in node.names if a.name in PATH_DECIDING_NAMES]
            continue
        else:
            continue
        if name in PATH_DECIDING_NAMES:
            found.append((node.lineno, name))
    return found


def path_decision_violations(sources: dict) -> list:
    """Messages for front modules other than the chooser that read what decides the path."""
    return [f"{module} reads {name} (line {line}): the call path is decided in {CHOOSER} "
            f"only (choose_path / choose_out_path)"
            for module, source in sorted(sources.items())
            if package_of(module) == "front" and module != CHOOSER
            for line, name in path_deciding_reads(source)]


def test_the_call_path_is_decided_in_one_place():
    sources = {m: p.read_text() for m, p in module_files().items()}
    assert CHOOSER in sources
    bad = path_decision_violations(sources)
    assert not bad, "\n".join(bad)


def test_the_path_rule_catches_a_planted_decision():
    planted = {"jitcore.api": "from .call.choice import NATIVE_LAYOUT_OK\n"
                              "fast = NATIVE_LAYOUT_OK\n",
               "jitcore.call.dispatch": "from . import choice\n"
                                        "ok = choice.NATIVE_EMPTY_OK\n",
               CHOOSER: "NATIVE_LAYOUT_OK = True\n",
               "jitcore.llvm.entry": "FASTCALL_MAX_INPUTS = 8\n"}
    bad = path_decision_violations(planted)
    assert len(bad) == 3 and all(f"decided in {CHOOSER}" in b for b in bad), bad
    assert {b.split()[0] for b in bad} == {"jitcore.api", "jitcore.call.dispatch"}


# ---- passes don't name op sets (issue 28: ops as data) ----------------------------------------
# An op is classified by its record (jitcore.ir.ops.info(op): kind, typing, cost, flags), never
# by a hand-kept collection of op names in the code that reads it. Checked with `ast` over the
# passes and the ir modules that read the records: a tuple, set or list literal naming two or
# more ops, a membership test against a literal naming any op (`op in (Op.A, ...)`), or a
# chain `x == Op.A or x == Op.B`. Naming ONE op (`node.op == Op.POW`, or a table keyed by op,
# one entry per op) stays allowed: a rewrite names the op it matches or builds.

# the modules checked: every pass, and ir/ but for ir/ops.py, which holds the records
OP_SET_SCOPE = ("passes/*.py", "ir/*.py")
OP_SET_EXEMPT = {
    "ir/ops.py": "the records themselves",
    "passes/fold_batch_norm.py": "a pattern rewrite: it matches the exact ops it folds (a "
                                 "constant under casts and reshapes; a batch norm after a "
                                 "conv or matmul), which no record property names",
}


def _is_op_ref(node) -> bool:
    """`Op.X` (or `*GROUP` inside a literal, which splices a set of ops in)."""
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "Op")


def op_set_violations(source: str, filename: str) -> list:
    """'file:line: what' for each hand-spelled op collection in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
            if sum(map(_is_op_ref, node.elts)) >= 2:
                found.append(f"{where}: a literal collection of ops")
        elif isinstance(node, ast.Compare):
            for cmp_op, right in zip(node.ops, node.comparators):
                if isinstance(cmp_op, (ast.In, ast.NotIn)) and \
                        isinstance(right, (ast.Tuple, ast.Set, ast.List)) and \
                        any(_is_op_ref(e) or isinstance(e, ast.Starred) for e in right.elts) \
                        and sum(map(_is_op_ref, right.elts)) < 2:   # (>= 2: reported above)
                    found.append(f"{where}: a membership test against named ops")
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            lefts = [ast.dump(v.left) for v in node.values
                     if isinstance(v, ast.Compare) and len(v.ops) == 1
                     and isinstance(v.ops[0], ast.Eq) and _is_op_ref(v.comparators[0])]
            if len(lefts) != len(set(lefts)):
                found.append(f"{where}: a chain of `== Op.X or == Op.Y`")
    return found


def test_passes_do_not_name_op_sets():
    found = []
    for pattern in OP_SET_SCOPE:
        for path in sorted(ROOT.glob(pattern)):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in OP_SET_EXEMPT:
                found += op_set_violations(path.read_text(), rel)
    assert not found, ("classify ops by their record (jitcore.ir.ops.info), not by listing "
                       "them:\n  " + "\n  ".join(found))


def test_the_op_set_check_catches_planted_violations():
    planted = {
        "S = frozenset({Op.EXP, Op.LOG})": "literal collection",
        "if node.op in (Op.SUM, Op.PROD): pass": "literal collection",
        "if node.op not in (Op.MAX, *INDEX_REDUCE): pass": "membership test",
        "if node.op in {Op.WAIT}: pass": "membership test",
        "if n.op == Op.INPUT or n.op == Op.CONST: pass": "chain",
    }
    for source, what in planted.items():
        found = op_set_violations(source, "planted.py")
        assert len(found) == 1 and what in found[0], (source, found)
    allowed = "if node.op == Op.POW and info(node.op).elementwise: x = build.node(Op.MUL, a, a)"
    assert op_set_violations(allowed, "planted.py") == []


# ---- kernel kinds register once (issue 28) ------------------------------------------------
# A kernel kind is a `passes.kernel.Kind`, spelled there only; each kind's backend module
# registers one entry (jitcore/llvm/registry.py), and everything else compares against the
# constants or asks the kind's properties.

KIND_HOME = ROOT / "passes" / "kernel.py"       # the one module that spells kind names
KIND_FOLDERS = ("jitcore", "passes", "ir")


def _kind_names() -> set:
    from jitcore.passes.kernel import Kind
    return {k.value for k in Kind}


def _is_kind_expr(node) -> bool:
    """`x.kind` or `kind`: what a kernel's kind is read as."""
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or \
        (isinstance(node, ast.Name) and node.id == "kind")


def kind_literals(source: str, names: set) -> list:
    """Lines where `source` spells a kernel kind as a string: compared with a `.kind` (==,
    !=, in, not in; alone or in a tuple/list/set), or a collection literal of kind names."""
    lines = []

    def literals(node):
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return [n for n in items if isinstance(n, ast.Constant) and n.value in names]

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_kind_expr(s) for s in sides):
                lines += [n.lineno for s in sides for n in literals(s)]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) > 1:
            if all(isinstance(n, ast.Constant) and n.value in names for n in node.elts):
                lines.append(node.lineno)
    return sorted(set(lines))


def kind_registrations(source: str, names: dict) -> list:
    """The kinds `source` registers: `register(KindEntry(Kind.X, ...))` calls."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register" \
                and node.args and isinstance(node.args[0], ast.Call) \
                and getattr(node.args[0].func, "id", None) == "KindEntry":
            first = node.args[0].args[0]
            if isinstance(first, ast.Attribute) and first.attr in names:
                found.append(names[first.attr])
    return found


def _product_files() -> list:
    return [p for folder in KIND_FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]


def test_kind_names_are_spelled_once():
    names = _kind_names()
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in _product_files() if p != KIND_HOME
           for line in kind_literals(p.read_text(), names)]
    assert not bad, f"compare kernel kinds with passes.kernel.Kind, not strings: {bad}"


def test_kinds_register_once():
    from jitcore.llvm.kinds import KINDS
    from jitcore.passes.kernel import Kind
    members = {k.name: k for k in Kind}
    registered = [k for p in (ROOT / "jitcore" / "llvm").glob("*.py")
                  for k in kind_registrations(p.read_text(), members)]
    assert sorted(registered) == sorted(Kind), \
        f"each kind registers exactly once: {sorted(map(str, registered))}"
    assert set(KINDS) == set(Kind)
    assert all(entry.kind == kind for kind, entry in KINDS.items())


def test_the_kind_checks_catch_a_string_and_a_second_registration():
    names = _kind_names()
    planted = 'def f(kernel):\n    if kernel.kind == "pool":\n        return 1\n' \
              '    return kernel.kind in ("gemm", "gemv")\n' \
              'KINDS = frozenset({"pointwise", "rows"})\n'
    assert kind_literals(planted, names) == [2, 4, 5]
    fine = 'layout = "rows"\nif p.layout == "rows":\n    pass\nname = "pool"\n'
    assert kind_literals(fine, names) == []
    from jitcore.llvm.registry import KINDS, KindEntry, register
    from jitcore.passes.kernel import Kind
    members = {k.name: k for k in Kind}
    twice = "register(KindEntry(Kind.POOL, A))\nregister(KindEntry(Kind.POOL, B))\n"
    assert kind_registrations(twice, members) == [Kind.POOL, Kind.POOL]
    with pytest.raises(ValueError, match="registered twice"):
        register(KindEntry(Kind.POOL, object))
    assert KINDS[Kind.POOL].emitter is not object


# ---- op spellings live in one place (issue 28) -----------------------------------------------
# An elementwise op with a row in the spelling table (jitcore/ops/spellings.py) is recorded only
# by its jc function in jitcore.ops.core (generated from the row, or the row's custom function);
# every other front module spells it through that function (core.exp, x + y, np.exp).
# Exceptions, each with its reason:
SPELLING_EXCEPTIONS = {
    "jitcore.ops.spellings": None,      # the table names each row's op
    "jitcore.ops.core": None,           # where the jc functions record them
    # a run-time size's value is summed in the tracer, which the op namespace is built on
    "jitcore.ops.tracer": {"ADD", "SUB"},
}


def spelled_elementwise_ops() -> dict:
    """{NAME of an elementwise op: the jc function of its row}."""
    from jitcore.ir.ops import ELEMENTWISE
    from jitcore.ops.spellings import SPELLINGS
    return {row.op.name: row.name for row in SPELLINGS if row.op in ELEMENTWISE}


def ops_named(source: str) -> list:
    """(line, NAME) for every `Op.NAME` in a module's source."""
    return [(node.lineno, node.attr) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "Op"]


def spelling_violations(sources: dict) -> list:
    """Messages for front modules (name -> source) that record a spelled elementwise op
    themselves instead of calling its jc function."""
    spelled, bad = spelled_elementwise_ops(), []
    for module, source in sorted(sources.items()):
        if package_of(module) != "front":
            continue
        allowed = SPELLING_EXCEPTIONS.get(module, set())
        for line, name in ops_named(source):
            if name in spelled and allowed is not None and name not in allowed:
                bad.append(f"{module} line {line}: Op.{name} has a row in "
                           f"jitcore/ops/spellings.py; call its jc function (jc.{spelled[name]}) "
                           "instead")
    return bad


def test_op_spellings_live_in_one_place():
    sources = {m: p.read_text() for m, p in module_files().items()}
    bad = spelling_violations(sources)
    assert not bad, "\n".join(bad)


def test_the_spelling_rule_catches_a_planted_violation():
    planted = "def clip(x):\n    return wrap(build.elementwise(Op.MAXIMUM, x.node, x.node))\n"
    assert spelling_violations({"jitcore.ops.join": planted}) == [
        "jitcore.ops.join line 2: Op.MAXIMUM has a row in jitcore/ops/spellings.py; call its "
        "jc function (jc.maximum) instead"]
    assert not spelling_violations({"jitcore.ops.core": planted})
    assert spelling_violations({"jitcore.ops.tracer": planted.replace("MAXIMUM", "MUL")})
    # ops that are not spelled elementwise ops (views, reductions, leaves) are free to build
    assert not spelling_violations({"jitcore.ops.join": planted.replace("MAXIMUM", "CUMSUM")})
