"""DEBUG records of the passes' decisions (where fusion stops and why) on the logger
"jitcore.passes". The passes run only while compiling; `logging` is imported at the first
record, and a record is only formatted when DEBUG is enabled for the logger."""
from __future__ import annotations

_LOGGER = None


def debug(msg: str, *args) -> None:
    global _LOGGER
    if _LOGGER is None:
        import logging
        _LOGGER = logging.getLogger("jitcore.passes")
    if _LOGGER.isEnabledFor(10):                 # logging.DEBUG
        _LOGGER.debug(msg, *args)
