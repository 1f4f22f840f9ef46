"""The value suites again at other instruction-set levels (pytest hooks, used by conftest.py).

One run of the suite (`python -m pytest tests -n auto`, what CI runs) also checks the code of
the levels most users' CPUs run: a sampled share of the tests of VALUE_MODULES runs again at
each level of `--levels` (default x86-64-v3 and x86-64-v2, see jitcore/llvm/target.py's
LEVELS), as extra items whose ids end in `@<level>` (`test_x[f32-7-@x86-64-v2]`). While
such an item runs (setup, call, teardown), JITCORE_TARGET's setting is that level (`config.override(target=)`) and every
jitted function forgets the plans it made at another level (`api.forget_plans`), so the
kernels it runs are built for that level: AVX2 without mask registers (scalar tails), SSE
without AVX. Tests that assert kernel shapes must derive them from `jc.target_info()`, which
follows the level.

`--levels=none` turns it off; `--level-share=1` runs every test of those modules at every
level (a full run per level); `--level-only` runs the level copies alone. Levels the host
cannot run are left out (said in the header). A test is picked by a hash of its id and the level, so a run
picks the same tests every time and each level its own share.
"""
from __future__ import annotations

import dataclasses
import zlib

import pytest
from _pytest.python import CallSpec

import jitcore as jc
from jitcore import config as jc_config
from jitcore.api import forget_plans
from jitcore.llvm.target import LEVELS

# the test modules whose tests compare values against numpy (a share of each runs per level)
VALUE_MODULES = frozenset({
    "test_elementwise", "test_casts", "test_bitwise", "test_reductions",
    "test_reduction_accuracy", "test_arg_reductions", "test_gemm", "test_gemv", "test_conv",
    "test_pooling", "test_gather_join", "test_vecmath_jit", "test_row_norms",
    "test_random_graphs", "test_broadcast_views", "test_composite_accuracy",
})
DEFAULT_LEVELS = "x86-64-v3,x86-64-v2"
DEFAULT_SHARE = 0.15


def pytest_addoption(parser):
    group = parser.getgroup("jitcore levels")
    group.addoption("--levels", default=DEFAULT_LEVELS,
                    help="instruction-set levels (comma-separated, or none) at which a share "
                         f"of the value tests runs again (default {DEFAULT_LEVELS})")
    group.addoption("--level-share", type=float, default=DEFAULT_SHARE,
                    help=f"share of the value tests run at each level (default {DEFAULT_SHARE})")
    group.addoption("--level-only", action="store_true",
                    help="run only the value tests' copies at other levels")


def requested_levels(option: str) -> list:
    """The levels of `--levels` in order; unknown names are a usage error."""
    names = [] if option.strip() in ("", "none") else [n.strip() for n in option.split(",")]
    unknown = [n for n in names if n not in LEVELS and n != "native"]
    if unknown:
        raise pytest.UsageError(f"--levels: unknown {', '.join(unknown)}; expected some of "
                                f"{', '.join(LEVELS)} or none")
    return [n for n in names if n != "native"]


def runnable(levels: list) -> tuple:
    """(the levels this host can run, {level: why not} for the others)."""
    ok, refused = [], {}
    for name in levels:
        try:
            jc.target_info(target=name)
            ok.append(name)
        except jc.TargetError as e:
            refused[name] = str(e)
    return ok, refused


def picked(nodeid: str, level: str, share: float) -> bool:
    """Deterministic sampling: the same tests every run, another share per level."""
    return zlib.crc32(f"{level}|{nodeid}".encode()) % 10000 < share * 10000


def pytest_configure(config):
    levels, refused = runnable(requested_levels(config.getoption("--levels")))
    config.jc_levels, config.jc_levels_refused = levels, refused


def pytest_report_header(config):
    share = config.getoption("--level-share")
    line = (f"value tests also at: {', '.join(config.jc_levels)} ({share:.0%} of them each)"
            if config.jc_levels else "value tests at the native target only")
    return [line] + [f"  level left out: {why}" for why in config.jc_levels_refused.values()]


def _with_id(item, suffix: str):
    """The item's parametrization (CallSpec) with one more id part: pytest builds a test's
    id from it, so `test_x[f32-7]` has the copy `test_x[f32-7-@x86-64-v2]`, and an item
    without parameters `test_y[@x86-64-v2]`."""
    spec = getattr(item, "callspec", None) or CallSpec()
    return dataclasses.replace(spec, _idlist=(*spec._idlist, suffix))


def level_items(item, levels: list, share: float) -> list:
    """Copies of one collected test, one per level that picks it."""
    copies = []
    for level in levels:
        if not picked(item.nodeid, level, share):
            continue
        copy = pytest.Function.from_parent(
            item.parent, name=f"{item.name}@{level}", callspec=_with_id(item, f"@{level}"),
            fixtureinfo=item._fixtureinfo, keywords={level: True},
            originalname=item.originalname)
        copy.jc_level = level
        copies.append(copy)
    return copies


def pytest_collection_modifyitems(session, config, items):
    levels, share = config.jc_levels, config.getoption("--level-share")
    if not levels or share <= 0:
        return
    extra = []
    for item in items:
        if isinstance(item, pytest.Function) and item.module.__name__ in VALUE_MODULES:
            extra += level_items(item, levels, share)
    if config.getoption("--level-only"):
        config.hook.pytest_deselected(items=list(items))
        items[:] = extra
    else:
        items.extend(extra)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    level = getattr(item, "jc_level", None)
    if level is None:
        yield
        return
    forget_plans()
    with jc_config.override(target=level):
        yield
    forget_plans()
