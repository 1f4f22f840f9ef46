"""threadpoolctl support: jitcore's intra-op pool appears in `threadpoolctl.threadpool_info()`
(`internal_api` and `user_api` "jitcore") and obeys `threadpool_limits(limits=n)`, with or
without `user_api="jitcore"`, restoring the count afterwards, like OpenBLAS or OpenMP.

threadpoolctl is optional and not imported by `import jitcore` (it would add a few ms to the
start-up): when it is already imported, the controller registers at once; otherwise a one-shot
import hook registers it right after threadpoolctl's own module has run.

threadpoolctl finds libraries by the shared objects loaded in the process. The pool is code
that jitcore compiles at run time into llvmlite's JIT, so the controller is matched to
llvmlite's library file (libllvmlite), the one jitcore always has loaded; its get/set
methods then call jitcore's Python thread settings, not the library.
"""
from __future__ import annotations

import sys

from jitcore.runtime.settings import MAX_THREADS

from . import log
from .parallel import get_num_threads, set_num_threads
from .version import VERSION

NAME = "jitcore"
_registered = False


def install() -> None:
    """Register now when threadpoolctl is imported, else when it gets imported."""
    module = sys.modules.get("threadpoolctl")
    if module is not None:
        register(module)
    elif not any(isinstance(f, _RegisterOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())


def register(threadpoolctl) -> None:
    """Register jitcore's controller with this threadpoolctl module (3.0 or later)."""
    global _registered
    if _registered or not hasattr(threadpoolctl, "register"):
        return
    threadpoolctl.register(_controller_class(threadpoolctl.LibController))
    _registered = True


def _controller_class(base):
    class JitcoreController(base):
        """jitcore's intra-op thread pool (jc.set_num_threads / jc.get_num_threads)."""
        user_api = NAME
        internal_api = NAME
        filename_prefixes = ("libllvmlite",)

        def get_num_threads(self):
            return get_num_threads()

        def set_num_threads(self, num_threads):
            # like the BLAS libraries, take any limit: clamped to what the pool allows
            set_num_threads(max(1, min(int(num_threads), MAX_THREADS)))

        def get_version(self):
            return VERSION

    return JitcoreController


class _RegisterOnImport:
    """A meta-path finder that waits for `import threadpoolctl`, lets the other finders
    locate it, and registers the controller once the module has run; then it leaves."""

    def find_spec(self, name, path=None, target=None):
        if name != "threadpoolctl":
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if finder is not self and find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module):
            run_module(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            try:
                register(module)
            except Exception as e:        # noqa: BLE001 -- never break the user's import
                log.warning("threadpoolctl: jitcore's controller did not register: %s", e)
        loader.exec_module = exec_module      # this spec's own loader instance
        return spec
