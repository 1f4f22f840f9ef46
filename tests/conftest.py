"""Test configuration: keep hypothesis' files out of the repository (in the temp directory),
give the run a fresh disk cache of compiled code (the user's stays untouched, and no test
reads code a previous run compiled; subprocesses inherit it), and make hypothesis
deterministic under CI (CI=true): CI checks the same random programs every run, while local
runs and `examples/fuzz.py` draw new ones.

Tests run against the installed package, as CI does: when jitcore is installed (not editable),
the checkout root leaves `sys.path` (here and, through PYTHONSAFEPATH, in the subprocesses the
tests start), so a file missing from the wheel fails here, not on a user's machine. Without an
installed copy the checkout itself is tested. The header of the run says which."""
import importlib.machinery
import os
import sys
import tempfile
from pathlib import Path

from hypothesis import configuration, settings

configuration.set_hypothesis_home_dir(
    os.path.join(tempfile.gettempdir(), f"jitcore-tests-hypothesis-{os.getuid()}"))

os.environ["JITCORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitcore-tests-cache-")
os.environ.setdefault("JITCORE_VERIFY", "1")      # every pass's output is type-checked in tests

CHECKOUT_ROOT = str(Path(__file__).resolve().parents[1])


def _prefer_installed_jitcore():
    """Drop the checkout root from sys.path when an installed jitcore exists; say which is tested."""
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != CHECKOUT_ROOT]
    if importlib.machinery.PathFinder.find_spec("jitcore", others) is None:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [CHECKOUT_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        return "source checkout"
    sys.path[:] = others
    os.environ["PYTHONSAFEPATH"] = "1"
    return "installed"


JITCORE_UNDER_TEST = _prefer_installed_jitcore()


def pytest_report_header(config):
    import jitcore
    return f"jitcore under test: {os.path.dirname(jitcore.__file__)} ({JITCORE_UNDER_TEST})"


# value tests again at other instruction-set levels (--levels, --level-share): level_runs.py
pytest_plugins = ["level_runs"]

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")
