"""Test configuration: keep hypothesis' files out of the repository (in the temp directory)."""
import os
import tempfile

from hypothesis import configuration

configuration.set_hypothesis_home_dir(
    os.path.join(tempfile.gettempdir(), f"jitcore-tests-hypothesis-{os.getuid()}"))
