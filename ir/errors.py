"""The exception hierarchy. It lives in `jitcore.ir` (the bottom layer) so every package can raise it;
`jitcore` re-exports it as the public `jc.JitcoreError`, `jc.ShapeError`, ...
"""


class JitcoreError(Exception):
    """Base of every error jitcore raises on purpose."""


class ShapeError(JitcoreError, ValueError):
    """Shapes, ranks or axes that do not fit the op or the compiled signature."""


class DTypeError(JitcoreError, TypeError):
    """A dtype that is not supported or does not fit the op or the compiled signature."""


class TraceError(JitcoreError):
    """Tracing a Python function failed (e.g. control flow on a tensor value)."""


class CompileError(JitcoreError):
    """A graph failed verification, lowering or LLVM compilation."""


class TargetError(JitcoreError, ValueError):
    """A compilation target this host cannot run, or one jitcore does not know."""


# Tracebacks and reprs name the public path (`jitcore.ShapeError`), not this module's.
for _error in (JitcoreError, ShapeError, DTypeError, TraceError, CompileError, TargetError):
    _error.__module__ = "jitcore"
del _error
