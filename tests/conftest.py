"""Test configuration: keep hypothesis' files out of the repository (in the temp directory),
give the run a fresh disk cache of compiled code (the user's stays untouched, and no test
reads code a previous run compiled; subprocesses inherit it), and make hypothesis
deterministic under CI (CI=true): CI checks the same random programs every run, while local
runs and `examples/fuzz.py` draw new ones."""
import os
import tempfile

from hypothesis import configuration, settings

configuration.set_hypothesis_home_dir(
    os.path.join(tempfile.gettempdir(), f"jitcore-tests-hypothesis-{os.getuid()}"))

os.environ["JITCORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitcore-tests-cache-")

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")
