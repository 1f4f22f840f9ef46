"""DEBUG records of the passes' decisions (where fusion stops and why) on the logger
"jitcore.passes". The passes run only while compiling; a record is only formatted when DEBUG
is enabled for the logger. (`logging` is imported with the package, not in a compiling
thread: see jitcore/log.py.)"""
from __future__ import annotations

import logging

LOGGER = logging.getLogger("jitcore.passes")


def debug(msg: str, *args) -> None:
    if LOGGER.isEnabledFor(logging.DEBUG):
        LOGGER.debug(msg, *args)
