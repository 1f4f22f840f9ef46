"""The public front: `jit`, `compile`, `Graph`, and the inspection methods of jitted functions."""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import time

import numpy as np

from jitcore.ir import build as b
from jitcore.ir.errors import DTypeError, JitcoreError, ShapeError, TraceError
from jitcore.ir.graph import ConstArray
from jitcore.ir.graph import Graph as IRGraph
from jitcore.ir.ops import Op
from jitcore.runtime.forksafe import renew_in_child
from jitcore.runtime.settings import validate_count

from . import foreign, log, pickling
from .callpath import MISMATCH, CallPlan
from .compiler import compile_graph
from .dispatch import Dispatch, lookup_paths, plan_key
from .lru import LRU
from .signature import describe, signature_of, to_array
from .targetinfo import select_target
from . import tensor_methods  # noqa: F401 -- gives Tracer its operators before any trace
from .tracer import TRACE, Tracer, node_of

_PLANS_LOCK = threading.Lock()            # guards every JitFunction's plan table
renew_in_child(sys.modules[__name__], "_PLANS_LOCK")


def _positional_names(fn) -> list:
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def _input_names(params: list, count: int, skip=()) -> list:
    """Names of the first `count` arguments a call passes (parameters bound as constants are
    not passed); `arg<i>` past the named ones."""
    names = [n for n in params if n not in skip][:count]
    names += [f"arg{i}" for i in range(len(names), count)]
    return names


def _constant_arrays(fn, constants: dict) -> dict:
    """jit(constants=): each name a positional parameter of fn, each value a private
    read-only copy, hashed once (changing the caller's array later changes nothing)."""
    if not isinstance(constants, dict):
        raise TypeError("jit(constants=) takes a dict of parameter name -> array")
    params = _positional_names(fn)
    out = {}
    for name, value in constants.items():
        if name not in params:
            raise TypeError(f"jit(constants=): {name!r} is not a parameter of "
                            f"{getattr(fn, '__name__', fn)!r} (parameters: {params})")
        out[name] = ConstArray(to_array(value, params.index(name), name))   # copies
    return out


def _user_out(result, out_given, out):
    """With out= torch tensors (written through numpy views), the tensors themselves."""
    if out is out_given:
        return result
    return tuple(out_given) if isinstance(out_given, (tuple, list)) else out_given


def _warn_copies(fn_name: str, given: tuple, arrays: tuple, names: list) -> None:
    """A new signature whose numpy inputs cannot be read in place: say so once (each call
    with such arrays copies them)."""
    for i, (g, a) in enumerate(zip(given, arrays)):
        if isinstance(g, np.ndarray) and a is not g and not np.may_share_memory(g, a):
            log.warning("%s: argument %d (%s) is copied on every call: byte-swapped, "
                        "misaligned or strides not whole elements", fn_name, i, names[i])


def _no_plan_yet(*args):
    return MISMATCH


def _outputs_of(result) -> list:
    items = result if isinstance(result, (tuple, list)) else [result]
    if not items:
        raise TraceError("a jitted function must return at least one tensor")
    for k, x in enumerate(items):
        if isinstance(x, (tuple, list, dict)):
            raise TraceError(f"a jitted function returns a tensor or a flat tuple/list of "
                             f"tensors; output {k} is a {type(x).__name__}")
    return [node_of(x) for x in items]


def _checked(graph: IRGraph) -> IRGraph:
    """Refuse graphs that use a tensor of another trace (a leaked tracer, another Graph's
    input): its value would be unknown here."""
    declared = {id(i) for i in graph.inputs}
    for node in graph.nodes():
        if node.op == Op.INPUT and id(node) not in declared:
            raise TraceError(f"{graph.name}: uses tensor %{node.arg} of another trace (a tracer "
                             "kept from an earlier call, or another Graph's input); pass it "
                             "as an argument instead")
    return graph


class JitFunction:
    """A Python function traced and compiled once per input signature, then called natively."""

    def __init__(self, fn, vector_width=None, num_threads=None, prepack_weights=True,
                 constants=None):
        # the options as given (every parameter but fn, so new ones travel too): a pickled
        # copy is rebuilt with them
        self._options = dict(locals())
        del self._options["self"], self._options["fn"]
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._params = _positional_names(fn)    # once: inspect.signature costs ~10 us a call
        # parameters bound to arrays at jit time: traced as constants, not passed at calls
        self._constants = _constant_arrays(fn, constants or {})
        if constants:                 # travel as bound now, not as the caller's arrays become
            self._options["constants"] = {n: c.array for n, c in self._constants.items()}
        self._vector_width = vector_width
        # intra-op threads for this function's kernels (None: jc.set_num_threads' setting)
        self.num_threads = None if num_threads is None else \
            validate_count(num_threads, "jit(num_threads=)")
        # constant matmul operands are packed into the GEMM's panel layout at compile time
        self.prepack_weights = prepack_weights
        # (shape, strides, dtype) per arg -> CallPlan; an LRU as long as the compile cache's,
        # so a function called with ever new shapes does not keep every compiled graph alive
        self._plans = LRU()
        # what a call tries first: the last plan's fast paths, or, while signatures change
        # between calls, the lookup paths (jitcore/dispatch.py), rebuilt when a plan is added
        self._lookup = _no_plan_yet, _no_plan_yet
        self._fast, self._fast_out = self._lookup
        if vector_width is not None:
            select_target(vector_width)   # validate early

    def _arg_names(self, count: int) -> list:
        return _input_names(self._params, count, skip=self._constants)

    # -- calling --------------------------------------------------------------------------
    def __call__(self, *args, out=None):
        # steady: the last signature's plan; its native entry checks that the arguments fit
        result = self._fast(args) if out is None else self._fast_out(args, out)
        if result is MISMATCH:
            # another signature: find its plan by one lookup, and keep looking up first
            # while signatures keep changing (a failed native call costs more than that)
            lookup = self._lookup
            if self._fast is not lookup[0]:      # (not when the lookup just missed)
                self._fast, self._fast_out = lookup
                result = lookup[0](args) if out is None else lookup[1](args, out)
            if result is MISMATCH:
                result = self._call_slow(args, out)
        return result

    def _call_slow(self, args: tuple, out):
        """Normalize the arguments, find or build the plan for their signature, call it."""
        views = foreign.views(args, out)
        if views is not None:
            # torch tensors, JAX arrays: viewed in place, a known plan's native entry takes them
            result = self._lookup[0](views[0]) if out is None else self._lookup[1](*views)
            if result is not MISMATCH:
                return _user_out(result, out, views[1])
        out_given, given = out, args
        if out is not None:
            out = foreign.out_arrays(out)
        args = tuple(to_array(a, i, n) for i, (a, n) in
                     enumerate(zip(args, self._arg_names(len(args)))))
        key = plan_key(args)
        with _PLANS_LOCK:
            plan = self._plans.lookup(key)
        if plan is None:
            _warn_copies(self.__name__, given, args, self._arg_names(len(args)))
            plan = CallPlan(self._compiled(args))
            with _PLANS_LOCK:
                self._plans.put(key, plan)
                # new lookup paths over a snapshot of the plans: calls read it unlocked
                self._lookup = lookup_paths(Dispatch(self._plans), self)
        result = plan(args, out)
        self._fast, self._fast_out = plan.fast, plan.fast_out      # after it worked once
        return _user_out(result, out_given, out)

    def _compiled(self, args: tuple):
        names = self._arg_names(len(args))
        sigs = [signature_of(a, i, n) for i, (a, n) in enumerate(zip(args, names))]
        t0 = time.perf_counter()
        graph = self._trace(sigs, names)
        trace_seconds = time.perf_counter() - t0
        strides = tuple(s[2] for s in sigs)
        return compile_graph(graph, strides, select_target(self._vector_width),
                             self.num_threads or 0, self.prepack_weights, trace_seconds)

    def _trace(self, sigs: list, names: list) -> IRGraph:
        inputs = [b.input_node(n, shape, dtype) for n, (shape, dtype, _) in zip(names, sigs)]
        saved = TRACE.forks, TRACE.fork_depth
        TRACE.forks, TRACE.fork_depth = 0, 0
        try:
            result = self._fn(*self._call_args([Tracer(i) for i in inputs]))
        except JitcoreError as e:      # say which signature the error belongs to
            sig = ", ".join(f"{n}: {describe(s)}" for n, s in zip(names, sigs))
            raise type(e)(f"{e} (while tracing {self.__name__}({sig}))").with_traceback(
                e.__traceback__) from None
        finally:
            TRACE.forks, TRACE.fork_depth = saved
        return _checked(IRGraph(self.__name__, inputs, _outputs_of(result)))

    def _call_args(self, tracers: list) -> list:
        """The traced function's positional arguments: the inputs in order, with each
        constant (a fresh const node) at its parameter's position."""
        if not self._constants:
            return tracers
        rest, args = iter(tracers), []
        for name in self._params:
            if name in self._constants:
                args.append(Tracer(b.const_array(self._constants[name])))
            else:
                nxt = next(rest, None)
                if nxt is None:
                    break
                args.append(nxt)
        return args + list(rest)

    # -- looking inside -------------------------------------------------------------------
    def graph(self, *args) -> str:
        """The traced tensor IR for these arguments (arrays or jc.spec(...)), as text."""
        names = self._arg_names(len(args))
        sigs = [signature_of(a, i, n) for i, (a, n) in enumerate(zip(args, names))]
        return self._trace(sigs, names).text()

    def kernels(self, *args) -> list:
        """The fused kernels (KernelInfo records) that these arguments compile to."""
        return list(self._compiled(args).kernels)

    def llvm_ir(self, *args, optimized: bool = True) -> str:
        """The LLVM IR of the compiled graph, after O3 (default) or as generated."""
        compiled = self._compiled(args)
        return compiled.optimized_ir if optimized else compiled.llvm_ir

    def asm(self, *args) -> str:
        """The machine code of the compiled graph, as assembly text."""
        return self._compiled(args).asm()

    def explain(self, *args) -> str:
        """A report: graph, kernels, vectorization decisions, bytes, flops and compile time."""
        from .explain import explain
        return explain(self._compiled(args))

    def __repr__(self):
        return f"<jitcore.jit {self.__name__}: {len(self._plans)} compiled signature(s)>"

    def __reduce__(self):
        """pickle / cloudpickle: the Python function and the options travel, compiled code
        does not (the receiving process compiles, or loads from its disk cache)."""
        return pickling.reduce(self)


def jit(fn=None, *, vector_width=None, num_threads=None, prepack_weights=True,
        constants=None):
    """Decorator: `@jc.jit` or `@jc.jit(vector_width=256)`.

    constants={"W": W} binds fn's parameter W to (a copy of) the array W: calls pass the other
    arguments only, and a matmul with W as its right operand reads it prepacked into the
    GEMM's panel layout (prepack_weights=False or JITCORE_PREPACK=0 turn that off)."""
    def wrap(f):
        return JitFunction(f, vector_width=vector_width, num_threads=num_threads,
                           prepack_weights=prepack_weights, constants=constants)
    return wrap(fn) if fn is not None else wrap


class Graph:
    """Explicit graph builder: `g = jc.Graph(); x = g.input("x", (4, 8), jc.float32);
    g.output(jc.exp(x)); fn = jc.compile(g)`."""

    def __init__(self, name: str = "graph"):
        self.name, self._inputs, self._outputs = name, [], []

    def input(self, name: str, shape, dtype=np.float32) -> Tracer:
        if any(i.arg == name for i in self._inputs):
            raise ShapeError(f"graph {self.name}: input {name!r} declared twice")
        if not name.isidentifier():
            raise ValueError(f"input name must be an identifier, got {name!r}")
        node = b.input_node(name, tuple(shape), dtype)
        self._inputs.append(node)
        return Tracer(node)

    def output(self, *values) -> None:
        self._outputs.extend(_outputs_of(list(values)))

    def to_ir(self) -> IRGraph:
        return _checked(IRGraph(self.name, list(self._inputs), list(self._outputs)))

    def text(self) -> str:
        return self.to_ir().text()


class CompiledFunction(JitFunction):
    """A Graph compiled for its declared input shapes and dtypes."""

    def __init__(self, graph: Graph, vector_width=None):
        self._ir = graph.to_ir()

        def fn(*args):
            raise TraceError("a compiled Graph cannot be re-traced")
        fn.__name__ = graph.name
        super().__init__(fn, vector_width=vector_width)
        self._names = [i.arg for i in self._ir.inputs]

    def _arg_names(self, count: int) -> list:
        return self._names[:count] + [f"arg{i}" for i in range(len(self._names), count)]

    def __reduce__(self):
        raise TypeError(f"{self.__name__}: a jc.compile(Graph) function cannot be pickled; "
                        "pickle a jc.jit function instead")

    def _trace(self, sigs, names):
        if len(sigs) != len(self._ir.inputs):
            raise ShapeError(f"{self.__name__}: expects {len(self._ir.inputs)} inputs "
                             f"({', '.join(i.arg for i in self._ir.inputs)}), got {len(sigs)}")
        for i, ((shape, dtype, _), inp) in enumerate(zip(sigs, self._ir.inputs)):
            if shape != inp.shape:
                raise ShapeError(f"{self.__name__}: argument {i} (%{inp.arg}) expects "
                                 f"{inp.dtype.name}{list(inp.shape)}, got {dtype.name}{list(shape)}")
            if dtype != inp.dtype:
                raise DTypeError(f"{self.__name__}: argument {i} (%{inp.arg}) expects "
                                 f"{inp.dtype.name}{list(inp.shape)}, got {dtype.name}{list(shape)}")
        return self._ir


def compile(graph: Graph, vector_width=None) -> CompiledFunction:  # noqa: A001 (API name)
    """Compile an explicit Graph; the result is called with arrays of the declared signature."""
    return CompiledFunction(graph, vector_width=vector_width)
