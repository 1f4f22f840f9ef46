"""The tensor IR: dtypes, shapes, the op set, graphs, their text form and the verifier."""
from . import build, dtypes, shapes
from .dtypes import DType, as_dtype
from .errors import CompileError, DTypeError, JitcoreError, ShapeError, TraceError
from .graph import ConstArray, Graph, Node, toposort
from .ops import Op
from .printer import print_graph
from .verifier import verify

__all__ = ["build", "dtypes", "shapes", "DType", "as_dtype", "CompileError", "DTypeError",
           "JitcoreError", "ShapeError", "TraceError", "ConstArray", "Graph", "Node", "toposort",
           "Op", "print_graph", "verify"]
