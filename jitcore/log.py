"""The "jitcore" logger: INFO for each compile, DEBUG for pass decisions (logger
"jitcore.passes"), WARNING for fallbacks. A NullHandler keeps it silent until the application
configures logging (`logging.basicConfig(level=logging.INFO)`, or a handler on "jitcore").

Only compiles and other cold paths log; a call that finds its compiled plan never does.
`logging` is imported with jitcore (about 2.5 ms), not at the first record: an import in a
compiling thread could be under way when another thread forks, and the child's own first
compile would then wait forever on that module's import lock.
"""
from __future__ import annotations

import logging

NAME = "jitcore"
LOGGER = logging.getLogger(NAME)
LOGGER.addHandler(logging.NullHandler())          # a library prints nothing by default

info = LOGGER.info
debug = LOGGER.debug
warning = LOGGER.warning
