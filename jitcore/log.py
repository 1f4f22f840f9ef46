"""The "jitcore" logger: INFO for each compile, DEBUG for pass decisions (logger
"jitcore.passes"), WARNING for fallbacks. A NullHandler keeps it silent until the application
configures logging (`logging.basicConfig(level=logging.INFO)`, or a handler on "jitcore").

Only compiles and other cold paths log; a call that finds its compiled plan never does.
`logging` itself is imported at the first message (it adds a few ms to `import jitcore`).
"""
from __future__ import annotations

NAME = "jitcore"
_LOGGER = None


def logger():
    global _LOGGER
    if _LOGGER is None:
        import logging
        log = logging.getLogger(NAME)
        log.addHandler(logging.NullHandler())     # a library prints nothing by default
        _LOGGER = log
    return _LOGGER


def info(msg: str, *args) -> None:
    logger().info(msg, *args)


def debug(msg: str, *args) -> None:
    logger().debug(msg, *args)


def warning(msg: str, *args) -> None:
    logger().warning(msg, *args)
