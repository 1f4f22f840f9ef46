"""Test configuration: keep hypothesis' files out of the repository (in the temp directory),
and give the run a fresh disk cache of compiled code (the user's stays untouched, and no
test reads code a previous run compiled; subprocesses inherit it)."""
import os
import tempfile

from hypothesis import configuration

configuration.set_hypothesis_home_dir(
    os.path.join(tempfile.gettempdir(), f"jitcore-tests-hypothesis-{os.getuid()}"))

os.environ["JITCORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitcore-tests-cache-")
