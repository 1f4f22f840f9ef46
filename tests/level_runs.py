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
level (a full run per level); `--level-only` runs the level copies alone (with
`-k x86-64-v2`, those of one level). Levels the host
cannot run are left out (said in the header). A test is picked by a hash of its id and the level, so a run
picks the same tests every time and each level its own share. DEFAULT_SHARE is the share of
all the levels together, so a host that runs more levels (AVX-512: v3 and v2) does not run a
longer suite; property tests (the random programs) run at every level, with EXAMPLES_SHARE of
their examples, also split between the levels.
"""
from __future__ import annotations

import contextlib
import dataclasses
import zlib

import pytest
from hypothesis import settings
try:                                     # pytest >= 9.1 (CallSpec2 before; pyproject allows >= 7)
    from _pytest.python import CallSpec
except ImportError:
    from _pytest.python import CallSpec2 as CallSpec

import jitcore as jc
from jitcore import config as jc_config
from jitcore.api import forget_plans
from jitcore.llvm.target import LEVELS

# the test modules whose tests compare values against numpy (a share of each runs per level)
VALUE_MODULES = frozenset({
    "test_elementwise", "test_casts", "test_bitwise", "test_reductions",
    "test_reduction_accuracy", "test_arg_reductions", "test_gemm", "test_gemv", "test_conv",
    "test_depthwise", "test_pooling", "test_gather_join", "test_vecmath_jit", "test_row_norms",
    "test_random_graphs", "test_broadcast_views", "test_composite_accuracy", "test_bfloat16",
    "test_random_bf16", "test_random_winograd",
})
DEFAULT_LEVELS = "x86-64-v3,x86-64-v2"
# the share of the value tests copied, for all levels together: each level of a run takes an
# equal part (an AVX2 host copies to x86-64-v2 alone at 8%; an AVX-512 host, which also runs
# x86-64-v3, copies 4% to each), so the suite's time does not grow with the host's ISA
DEFAULT_SHARE = 0.08
# modules whose tests cost the most per test run a smaller share (times this factor):
# test_reductions compiles a graph of every reduction per case (a fifth of the copies' time
# at 15%, measured; the share is 8% now)
SHARE_FACTOR = {"test_reductions": 0.5}
# property tests (hypothesis: the random programs) run at every level, with this share of
# their examples, also split between the levels of a run
EXAMPLES_SHARE = 0.1


def pytest_addoption(parser):
    group = parser.getgroup("jitcore levels")
    group.addoption("--levels", default=DEFAULT_LEVELS,
                    help="instruction-set levels (comma-separated, or none) at which a share "
                         f"of the value tests runs again (default {DEFAULT_LEVELS})")
    group.addoption("--level-share", type=float, default=None,
                    help="share of the value tests run at each level (default "
                         f"{DEFAULT_SHARE} divided by the number of levels)")
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
    """(the levels this host can run that generate other code than native, {level: why
    not} for the others). A level whose vector code is the native target's (x86-64-v3 on an
    AVX2 host: same width, tails, FMA) adds nothing the native run does not test."""
    ok, refused = [], {}
    native = _code_facts(jc.target_info(target="native"))
    for name in levels:
        try:
            info = jc.target_info(target=name)
        except jc.TargetError as e:
            refused[name] = str(e)
            continue
        if _code_facts(info) == native:
            refused[name] = f"{name}: its vector code is the native run's on this host"
        else:
            ok.append(name)
    return ok, refused


def _code_facts(info: dict) -> tuple:
    """What decides the vector code a level gets: width, masked tails, FMA."""
    return info["vector_bits"], info["masked_tails"], "fma" in info["features"]


def picked(nodeid: str, level: str, share: float) -> bool:
    """Deterministic sampling: the same tests every run, another share per level."""
    return zlib.crc32(f"{level}|{nodeid}".encode()) % 10000 < share * 10000


def pytest_configure(config):
    levels, refused = runnable(requested_levels(config.getoption("--levels")))
    config.jc_levels, config.jc_levels_refused = levels, refused
    share = config.getoption("--level-share")
    config.jc_level_share = DEFAULT_SHARE / max(len(levels), 1) if share is None else share


def pytest_report_header(config):
    share = config.jc_level_share
    line = (f"value tests also at: {', '.join(config.jc_levels)} ({share:.0%} of them each)"
            if config.jc_levels else "value tests at the native target only")
    return [line] + [f"  level left out: {why}" for why in config.jc_levels_refused.values()]


def _with_id(item, suffix: str):
    """The item's parametrization (CallSpec) with one more id part: pytest builds a test's
    id from it, so `test_x[f32-7]` has the copy `test_x[f32-7-@x86-64-v2]`, and an item
    without parameters `test_y[@x86-64-v2]`."""
    spec = getattr(item, "callspec", None) or CallSpec()
    return dataclasses.replace(spec, _idlist=(*spec._idlist, suffix))


def _is_property_test(item) -> bool:
    return getattr(item.obj, "is_hypothesis_test", False)


def level_items(item, levels: list, share: float) -> list:
    """Copies of one collected test, one per level that picks it."""
    copies = []
    for level in levels:
        if not (_is_property_test(item) or picked(item.nodeid, level, share)):
            continue
        copy = pytest.Function.from_parent(
            item.parent, name=f"{item.name}@{level}", callspec=_with_id(item, f"@{level}"),
            fixtureinfo=item._fixtureinfo, keywords={level: True},
            originalname=item.originalname)
        copy.jc_level = level
        copies.append(copy)
    return copies


def pytest_collection_modifyitems(session, config, items):
    levels, share = config.jc_levels, config.jc_level_share
    if not levels or share <= 0:
        return
    extra = []
    for item in items:
        module = item.module.__name__ if isinstance(item, pytest.Function) else None
        if module in VALUE_MODULES:
            extra += level_items(item, levels, share * SHARE_FACTOR.get(module, 1.0))
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
    with jc_config.override(target=level), _fewer_examples(item, len(item.config.jc_levels)):
        yield
    forget_plans()


@contextlib.contextmanager
def _fewer_examples(item, levels: int):
    """A property test's settings with EXAMPLES_SHARE of its examples split between the run's
    `levels`, while `item` runs (hypothesis reads them from the test function at each call)."""
    fn = item.obj
    saved = getattr(fn, "_hypothesis_internal_use_settings", None)
    if not _is_property_test(item) or saved is None:
        yield
        return
    fn._hypothesis_internal_use_settings = settings(
        saved, max_examples=max(1, round(saved.max_examples * EXAMPLES_SHARE / levels)))
    try:
        yield
    finally:
        fn._hypothesis_internal_use_settings = saved
