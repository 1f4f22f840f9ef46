"""The public front: `jit`, `compile`, `Graph`, and the inspection methods of jitted functions."""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import dataclasses
import time
import weakref
from dataclasses import dataclass

import numpy as np

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import DTypeError, JitcoreError, ShapeError, TraceError
from jitcore.ir.graph import ConstArray
from jitcore.ir.graph import Graph as IRGraph
from jitcore.ir.ops import Op
from jitcore.passes.dynamic import NotDynamic
from jitcore.runtime.forksafe import renew_in_child
from jitcore.runtime.settings import validate_count

from . import log, pickling
from .cache.lru import LRU
from .call import foreign
from .call.arguments import (Identity, input_names, name_of, positional_names, static_spec,
                             takes_varargs)
from .call.choice import choose_out_path, choose_path
from .call.dispatch import Dispatch, foreign_path, lookup_paths, plan_key
from .call.plan import MISMATCH, SCALAR_TYPES, CallPlan, ScalarArgs, output_specs
from .call.shape_classes import class_key, shape_classes
from .call.signature import describe, signature_of, to_array
from .compiler import compile_graph
from .llvm.bf16 import policy as bf16_policy
from .ops import tensor_methods  # noqa: F401 -- gives Tracer its operators before any trace
from .ops.tracer import TRACE, Tracer, WeakScalar, node_of
from .targetinfo import select_target

_PLANS_LOCK = threading.Lock()            # guards every JitFunction's plan table
renew_in_child(sys.modules[__name__], "_PLANS_LOCK")


def _constant_arrays(fn, constants: dict) -> dict:
    """jit(constants=): each name a positional parameter of fn, each value a private
    read-only copy, hashed once (changing the caller's array later changes nothing)."""
    if not isinstance(constants, dict):
        raise TypeError("jit(constants=) takes a dict of parameter name -> array")
    params = positional_names(fn)
    out = {}
    for name, value in constants.items():
        if name not in params:
            raise TypeError(f"jit(constants=): {name!r} is not a parameter of "
                            f"{name_of(fn)!r} (parameters: {params})")
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


@dataclass(frozen=True)
class _Dynamic:
    """What dynamic=True made of a shape class: `compiled` (None: compiled per shape, `note`
    says why), the class itself, and the Python scalar arguments' records."""
    compiled: object
    shape_class: object
    scalars: object
    note: str | None


def _scalar_args(weak: list):
    scalars = {i: (w.pytype, w.narrowed) for i, w in enumerate(weak) if w is not None}
    return ScalarArgs(scalars) if scalars else None


def _no_plan_yet(*args):
    return MISMATCH


def _is_python_scalar(x) -> bool:
    return type(x) in SCALAR_TYPES


def _has_tracer(args, kwargs) -> bool:
    return any(isinstance(a, Tracer) for a in args) or \
        any(isinstance(v, Tracer) for v in kwargs.values())


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
    """A Python function traced and compiled once per input signature, then called natively.

    Called while another function is traced (with a traced tensor among its arguments), it
    is traced inline: its ops become part of the caller's graph."""

    def __init__(self, fn, vector_width=None, num_threads=None, prepack_weights=True,
                 constants=None, static_argnums=(), static_argnames=(), dynamic=False,
                 target=None, matmul_precision=None):
        # the options as given (every parameter but fn, so new ones travel too): a pickled
        # copy is rebuilt with them
        self._options = dict(locals())
        del self._options["self"], self._options["fn"]
        if not callable(fn):
            raise TypeError(f"jc.jit needs a function (or another callable), got "
                            f"{type(fn).__name__} {fn!r}")
        # a callable object's own attributes are not copied: they could shadow our methods
        functools.update_wrapper(self, fn, updated=() if not inspect.isfunction(fn) else
                                 functools.WRAPPER_UPDATES)
        self.__name__ = name_of(fn)
        self._fn = fn
        self._params = positional_names(fn)    # once: inspect.signature costs ~10 us a call
        self._varargs = takes_varargs(fn)
        # parameters bound to arrays at jit time: traced as constants, not passed at calls
        self._constants = _constant_arrays(fn, constants or {})
        if constants:                 # travel as bound now, not as the caller's arrays become
            self._options["constants"] = {n: c.array for n, c in self._constants.items()}
        # arguments that are Python values baked into the trace (part of the cache key)
        self._static_positions, self._static_keywords = static_spec(
            fn, [n for n in self._params if n not in self._constants], static_argnums,
            static_argnames)
        _LIVE.add(self)
        self._vector_width = vector_width
        # the instruction-set level (None: JITCORE_TARGET's, read at each compile)
        self._target = target
        # intra-op threads for this function's kernels (None: jc.set_num_threads' setting)
        self.num_threads = None if num_threads is None else \
            validate_count(num_threads, "jit(num_threads=)")
        # constant matmul operands are packed into the GEMM's panel layout at compile time
        self.prepack_weights = prepack_weights
        # how float32 matmuls compute: "fp32" or "bf16" (None: JITCORE_MATMUL_PRECISION's)
        self.matmul_precision = None if matmul_precision is None else \
            bf16_policy(matmul_precision)
        # dynamic=True: leading extents are run-time values (jitcore/call/shape_classes.py); shape
        # class -> _Dynamic (the compiled graph, or why the class is compiled per shape)
        self.dynamic = bool(dynamic)
        self._forget_plans()
        if vector_width is not None or target is not None:
            select_target(vector_width, target)   # validate early

    def _forget_plans(self) -> None:
        """No call plan yet: the next call of each signature compiles (or finds its code in
        the compile cache) for the settings of that moment."""
        self._classes = LRU()
        # (shape, strides, dtype) per arg -> CallPlan; an LRU as long as the compile cache's,
        # so a function called with ever new shapes does not keep every compiled graph alive
        self._plans = LRU()
        # what a call tries first: the last plan's fast paths, or, while signatures change
        # between calls, the lookup paths (jitcore/call/dispatch.py), rebuilt when a plan is added
        self._lookup = _no_plan_yet, _no_plan_yet
        self._dispatch = None
        self._fast, self._fast_out = self._lookup
        # static arguments' values (and keyword layouts) -> a JitFunction of the rest
        self._variants = LRU()

    def _arg_names(self, count: int) -> list:
        return input_names(self._params, count, skip=self._constants)

    def __get__(self, obj, objtype=None):
        """`@jc.jit` on a method: `obj.method` binds obj as a static argument."""
        return self if obj is None else BoundJitFunction(self, obj)

    # -- calling --------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        # (`out=` is read from kwargs: a keyword-only parameter costs every call ~0.1 us)
        if not kwargs and not self._static_positions:
            # steady: the last signature's plan; its native code checks that the arguments fit
            result = self._fast(args)
            if result is not MISMATCH:
                return result
            out = None
        else:
            out = kwargs.pop("out", None)
            if kwargs or self._static_positions:
                # (traced arguments reach the variant's slow path, which traces it inline)
                target, args = self._resolve(args, kwargs)
                return target(*args, out=out)
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
        if _has_tracer(args, {}):
            return self._inline(args, {}, out)
        views = foreign.views(args, out)
        if views is not None:
            # torch tensors, JAX arrays: viewed in place, a known plan's native entry takes them
            result = self._lookup[0](views[0]) if out is None else self._lookup[1](*views)
            if result is not MISMATCH:
                steady = foreign.steady_type(args)
                if out is None and steady is not None:
                    # the next calls view such arrays first, without this detour
                    self._fast = foreign_path(self._dispatch, *steady)
                return _user_out(result, out, views[1])
        out_given, given = out, args
        if out is not None:
            out = foreign.out_arrays(out)
        args = self._normalized(args)
        key = plan_key(args)
        with _PLANS_LOCK:
            plan = self._plans.lookup(key)
        if plan is None:
            _warn_copies(self.__name__, given, args, self._arg_names(len(args)))
            compiled, scalars, extents = self._compiled_with_scalars(args)
            plan = CallPlan(compiled, scalars, extents)
            with _PLANS_LOCK:
                self._plans.put(key, plan)
                # new lookup paths over a snapshot of the plans: calls read it unlocked
                self._dispatch = Dispatch(self._plans)
                self._lookup = lookup_paths(self._dispatch, self)
        result = plan(plan.prepare(args), out)
        self._fast, self._fast_out = plan.fast, plan.fast_out      # after it worked once
        return _user_out(result, out_given, out)

    def _normalized(self, args: tuple) -> tuple:
        """Arrays as the kernels read them; Python scalars stay (weak run-time values)."""
        names = self._arg_names(len(args))
        return tuple(a if _is_python_scalar(a) else to_array(a, i, n)
                     for i, (a, n) in enumerate(zip(args, names)))

    def _inline(self, args: tuple, kwargs: dict, out):
        """Called while tracing another function: trace the body into the caller's graph."""
        if out is not None:
            raise TraceError(f"{self.__name__}: out= is not supported when it is called "
                             "inside another jitted function")
        return self._fn(*self._call_args(list(args)), **kwargs)

    # -- static arguments and keywords ---------------------------------------------------
    def _resolve(self, args: tuple, kwargs: dict, bound: bool = False):
        """(the JitFunction that runs this call, its array arguments): self for plain
        positional calls; for static arguments, keywords or a bound `self`, the variant for
        these static values, traced with them baked in."""
        if not (kwargs or self._static_positions or bound):
            return self, args
        layout, dyn, dyn_kw, static_kw = [], [], [], []
        for i, a in enumerate(args):
            if bound and i == 0:
                layout.append((i, Identity(a)))
            elif i in self._static_positions:
                layout.append((i, type(a), a))
            else:
                dyn.append(a)
        for k in sorted(kwargs):
            if k in self._static_keywords:
                static_kw.append((k, type(kwargs[k]), kwargs[k]))
            else:
                dyn_kw.append(k)
                dyn.append(kwargs[k])
        key = (len(args), tuple(layout), tuple(dyn_kw), tuple(static_kw))
        try:
            hash(key)
        except TypeError:
            raise self._unhashable(args, layout, static_kw) from None
        with _PLANS_LOCK:
            variant = self._variants.lookup(key)
        if variant is None:
            variant = self._specialize(len(args), layout, tuple(dyn_kw), static_kw)
            with _PLANS_LOCK:
                self._variants.put(key, variant)
        return variant, tuple(dyn)

    def _unhashable(self, args, layout, static_kw) -> TypeError:
        names = self._arg_names(len(args))
        values = [(names[e[0]], e[2]) for e in layout if len(e) == 3] + \
            [(k, v) for k, _, v in static_kw]
        for name, value in values:
            try:
                hash(value)
            except TypeError:
                return TypeError(
                    f"{self.__name__}: static argument {name!r} must be hashable (its value "
                    f"is part of the compile cache key), got {type(value).__name__} "
                    f"{value!r}; pass a tuple instead of a list, or pass arrays as "
                    "non-static arguments")
        return TypeError(f"{self.__name__}: static arguments must be hashable")

    def _specialize(self, n_pos: int, layout: list, dyn_kw: tuple, static_kw: list):
        """A JitFunction of the non-static arguments that calls fn with the static ones."""
        static_at = {e[0]: (e[1].obj if len(e) == 2 else e[2]) for e in layout}
        kw_static = {k: v for k, _, v in static_kw}
        fn, with_constants = self._fn, self._call_args

        def specialized(*dyn):
            rest = iter(dyn)
            full = [static_at[i] if i in static_at else next(rest) for i in range(n_pos)]
            return fn(*with_constants(full), **kw_static, **dict(zip(dyn_kw, rest)))
        specialized.__name__ = self.__name__
        variant = JitFunction(specialized, vector_width=self._vector_width, target=self._target,
                              num_threads=self.num_threads,
                              prepack_weights=self.prepack_weights, dynamic=self.dynamic,
                              matmul_precision=self.matmul_precision)
        names = self._arg_names(n_pos)
        variant._params = [names[i] for i in range(n_pos) if i not in static_at] + list(dyn_kw)
        return variant

    # -- tracing ----------------------------------------------------------------------------
    def _signatures(self, args: tuple) -> tuple:
        """(names, signatures, weak scalar records) of the arguments of one call."""
        names = self._arg_names(len(args))
        sigs, weak = [], []
        for i, (a, n) in enumerate(zip(args, names)):
            if _is_python_scalar(a):
                sigs.append(((), dt.as_dtype(SCALAR_TYPES[type(a)]), None))
                weak.append(WeakScalar(type(a), n, set()))
            else:
                sigs.append(signature_of(a, i, n))
                weak.append(None)
        return names, sigs, weak

    def _compiled_with_scalars(self, args: tuple):
        """(compiled graph, ScalarArgs or None, the run-time extents' values) for a call."""
        names, sigs, weak = self._signatures(args)
        if self.dynamic:
            found = self._dynamic(names, sigs, weak)
            if found.compiled is not None:
                return found.compiled, found.scalars, found.shape_class.extents(sigs)
        t0 = time.perf_counter()
        graph = self._trace(sigs, names, weak)
        trace_seconds = time.perf_counter() - t0
        strides = tuple(s[2] for s in sigs)
        compiled = compile_graph(graph, strides, select_target(self._vector_width, self._target),
                                 self.num_threads or 0, self.prepack_weights, trace_seconds,
                                 matmul_precision=self.matmul_precision)
        return compiled, _scalar_args(weak), ()

    def _dynamic(self, names: list, sigs: list, weak: list) -> "_Dynamic":
        """The compiled code of a call's shape class (traced with placeholders for its
        run-time extents), or, when no extent can vary or the graph needs their values, a
        record of why (the call then compiles per shape)."""
        tries = shape_classes(sigs, self._symbolic_axes(sigs))
        if not tries:
            return _Dynamic(None, None, None, "no extent can vary (leading extents of 0 or 1, "
                            "or no C-contiguous array argument)")
        key = tuple(class_key(sc) for sc in tries)
        with _PLANS_LOCK:
            found = self._classes.lookup(key)
        if found is not None:
            return found
        reasons = []
        for sc in tries:
            found = self._compile_class(sc, names, weak)
            if found.compiled is not None:
                break
            reasons.append(f"{sc.describe(names)}: {found.note}")
        found = dataclasses.replace(found, note="; ".join(reasons) or None)
        if found.compiled is None:
            log.info("%s: dynamic=True: compiled per shape: %s", self.__name__, found.note)
        with _PLANS_LOCK:
            self._classes.put(key, found)
        return found

    def _symbolic_axes(self, sigs: list):
        """Per argument, the axes that may be run-time extents, when this function knows
        them (a torch part: its export's symbolic dims); None: the leading and sequence axes
        (jitcore/call/shape_classes.py)."""
        return None

    def _compile_class(self, sc, names: list, weak: list) -> "_Dynamic":
        """One shape class traced with placeholders and compiled, or why it cannot be."""
        weak = [None if w is None else WeakScalar(w.pytype, w.name, set()) for w in weak]
        t0 = time.perf_counter()
        try:
            graph = self._trace(list(sc.sigs), names, weak)
            compiled = compile_graph(graph, tuple(s[2] for s in sc.sigs),
                                     select_target(self._vector_width, self._target),
                                     self.num_threads or 0, self.prepack_weights,
                                     time.perf_counter() - t0,
                                     dynamic=True, matmul_precision=self.matmul_precision)
            return _Dynamic(compiled, sc, _scalar_args(weak), None)
        except NotDynamic as e:
            return _Dynamic(None, sc, None, e.reason)
        except JitcoreError as e:      # e.g. the graph combines it with a static extent
            return _Dynamic(None, sc, None, "tracing with it as a run-time extent failed: "
                            f"{str(e).split(' (while tracing')[0]}")

    def _compiled(self, args: tuple):
        return self._compiled_with_scalars(args)[0]

    def _trace(self, sigs: list, names: list, weak: list | None = None) -> IRGraph:
        inputs = [build.input_node(n, shape, dtype) for n, (shape, dtype, _) in zip(names, sigs)]
        tracers = [Tracer(i, w) for i, w in zip(inputs, weak or [None] * len(inputs))]
        saved = TRACE.forks, TRACE.fork_depth
        TRACE.forks, TRACE.fork_depth = 0, 0
        try:
            result = self._fn(*self._call_args(tracers))
        except JitcoreError as e:      # say which signature the error belongs to
            sig = ", ".join(f"{n}: {describe(s)}" for n, s in zip(names, sigs))
            raise type(e)(f"{e} (while tracing {self.__name__}({sig}))").with_traceback(
                e.__traceback__) from None
        finally:
            TRACE.forks, TRACE.fork_depth = saved
        if result is None:
            raise TraceError(f"{self.__name__} returned None: a jitted function must return "
                             "its result (is a `return` missing?)")
        return _checked(IRGraph(self.__name__, inputs, _outputs_of(result)))

    def _call_args(self, args: list) -> list:
        """The traced function's positional arguments: the call's in order, with each
        constant (a fresh const node) at its parameter's position."""
        if not self._constants:
            return args
        takes = len(self._params) - len(self._constants)
        if len(args) > takes and not self._varargs:
            bound = ", ".join(self._constants)
            raise TypeError(f"{self.__name__} takes {takes} argument{'s' * (takes != 1)} "
                            f"besides the bound constants ({bound}); {len(args)} "
                            f"{'was' if len(args) == 1 else 'were'} given")
        rest, full = iter(args), []
        for name in self._params:
            if name in self._constants:
                full.append(Tracer(build.const_array(self._constants[name])))
            else:
                nxt = next(rest, None)
                if nxt is None:
                    break
                full.append(nxt)
        return full + list(rest)

    # -- looking inside -------------------------------------------------------------------
    def _inspected(self, args: tuple, kwargs: dict, bound: bool = False):
        if _has_tracer(args, kwargs):
            raise TraceError(f"{self.__name__}: inspection methods take arrays or jc.spec(...), "
                             "not traced tensors")
        return self._resolve(args, kwargs, bound)

    def graph(self, *args, **kwargs) -> str:
        """The traced tensor IR for these arguments (arrays or jc.spec(...)), as text."""
        target, args = self._inspected(args, kwargs)
        names, sigs, weak = target._signatures(args)
        if target.dynamic:                  # the graph the call runs: run-time sizes as s0...
            found = target._dynamic(names, sigs, weak)
            if found.compiled is not None:
                sigs = list(found.shape_class.sigs)
        return target._trace(sigs, names, weak).text()

    def kernels(self, *args, **kwargs) -> list:
        """The fused kernels (KernelInfo records) that these arguments compile to (bytes and
        flops at these arguments' sizes)."""
        target, args = self._inspected(args, kwargs)
        compiled, _, extents = target._compiled_with_scalars(args)
        return compiled.kernels_at(extents)

    def llvm_ir(self, *args, optimized: bool = True, **kwargs) -> str:
        """The LLVM IR of the compiled graph, as compiled (default: the kernels after O3, the
        graph's own glue module as generated) or as generated."""
        target, args = self._inspected(args, kwargs)
        compiled = target._compiled(args)
        return compiled.optimized_ir if optimized else compiled.llvm_ir

    def asm(self, *args, **kwargs) -> str:
        """The machine code of the compiled graph, as assembly text."""
        target, args = self._inspected(args, kwargs)
        return target._compiled(args).asm()

    def explain(self, *args, **kwargs) -> str:
        """A report: graph, kernels, vectorization decisions, bytes, flops, the call path a
        call with these arguments takes and why (jitcore/call/choice.py), and compile time."""
        from .explain import explain
        target, args = self._inspected(args, kwargs)
        compiled, _, extents = target._compiled_with_scalars(args)
        paths = choose_path(compiled, output_specs(compiled, extents)), choose_out_path(compiled)
        report = explain(compiled, extents, paths)
        return report if not target.dynamic else target._shapes_line(args) + "\n" + report

    def _shapes_line(self, args: tuple) -> str:
        """explain()'s first line for dynamic=True: which extents are run-time values."""
        names, sigs, weak = self._signatures(args)
        found = self._dynamic(names, sigs, weak)
        if found.compiled is None:
            return f"shapes: every extent static (compiled per shape): {found.note}"
        values = found.shape_class.extents(sigs)
        run_time = found.shape_class.describe(names)
        return (f"shapes: run-time extents {run_time} (this call: "
                f"{', '.join(f's{k}={v}' for k, v in enumerate(values))}; each >= 2, sizes "
                "0 and 1 compile on their own); every other extent static"
                + (f" (tried first: {found.note})" if found.note else ""))

    def __repr__(self):
        count = len(self._plans) + sum(len(v._plans) for v in list(self._variants.values()))
        return f"<jitcore.jit {self.__name__}: {count} compiled signature(s)>"

    def __reduce__(self):
        """pickle / cloudpickle: the Python function and the options travel, compiled code
        does not (the receiving process compiles, or loads from its disk cache)."""
        return pickling.reduce(self)



# every JitFunction alive, for forget_plans
_LIVE: "weakref.WeakSet[JitFunction]" = weakref.WeakSet()


def forget_plans() -> None:
    """Every jitted function drops its call plans. A plan holds code compiled for the target
    of its first call; after an in-process change of JITCORE_TARGET's setting
    (`config.override(target=...)`, as the tests' level runs do), call this so that no
    function keeps running code built for the previous target."""
    with _PLANS_LOCK:
        for function in list(_LIVE):
            function._forget_plans()


class BoundJitFunction:
    """`obj.method` for a method decorated with `@jc.jit`: obj is the first argument, static
    (the object itself is part of the cache key, so the values the trace reads from its
    attributes are constants of that object's compiled code, as for any static argument)."""

    def __init__(self, function: JitFunction, obj):
        self.__func__, self.__self__ = function, obj
        self.__name__ = function.__name__

    def __call__(self, *args, out=None, **kwargs):
        target, dyn = self.__func__._resolve((self.__self__, *args), kwargs, bound=True)
        return target(*dyn, out=out)

    def _with_self(self, method: str, args, kwargs, **options):
        target, dyn = self.__func__._inspected((self.__self__, *args), kwargs, bound=True)
        return getattr(target, method)(*dyn, **options)

    def graph(self, *args, **kwargs) -> str:
        return self._with_self("graph", args, kwargs)

    def kernels(self, *args, **kwargs) -> list:
        return self._with_self("kernels", args, kwargs)

    def llvm_ir(self, *args, optimized: bool = True, **kwargs) -> str:
        return self._with_self("llvm_ir", args, kwargs, optimized=optimized)

    def asm(self, *args, **kwargs) -> str:
        return self._with_self("asm", args, kwargs)

    def explain(self, *args, **kwargs) -> str:
        return self._with_self("explain", args, kwargs)

    def __repr__(self):
        return f"<bound jitcore.jit {self.__name__} of {self.__self__!r}>"


def jit(fn=None, *, vector_width=None, num_threads=None, prepack_weights=True,
        constants=None, static_argnums=(), static_argnames=(), dynamic=False, target=None,
        matmul_precision=None):
    """Decorator: `@jc.jit` or `@jc.jit(vector_width=256)`.

    target="x86-64-v3" (or "x86-64-v4", "x86-64-v2", "x86-64", "native"; default:
    JITCORE_TARGET, else native) builds code for that instruction-set level only; a level
    above the host's CPU raises jc.TargetError. vector_width caps the width below the level's.

    constants={"W": W} binds fn's parameter W to (a copy of) the array W: calls pass the other
    arguments only, and a matmul with W as its right operand reads it prepacked into the
    GEMM's panel layout (prepack_weights=False or JITCORE_PREPACK=0 turn that off).

    static_argnums / static_argnames: arguments (by call position / by name) that are
    Python values baked into the trace, as in JAX: each distinct value (hashable) compiles
    once. Other Python scalar arguments (bool, int, float) are run-time values, weak-typed
    as in numpy 2 (f(float32_array, 2.0) is float32); arrays are inputs.

    dynamic=True: the leading extent of each array argument (the batch) and the
    second-to-last of arrays of rank >= 3 (the sequence) are run-time values, so calls whose
    batch sizes or sequence lengths differ share one compiled graph; equal extents are one
    value (checked at each call); sizes 0 and 1 and the other axes are static. A graph that
    needs such an extent's value (a slice of it, a mean over it...) tries the batch alone,
    else is compiled per shape, and explain() says why (jitcore/call/shape_classes.py).

    matmul_precision="bf16": float32 matmuls and convolutions (not depthwise ones) multiply
    their operands rounded to bfloat16 (to nearest even) and accumulate in float32
    (`vdpbf16ps` where the CPU has AVX512_BF16, else the same values through float32 FMAs,
    slower; explain() says which); everything else
    stays float32. "fp32" (or "highest") computes in float32; None (the default):
    JITCORE_MATMUL_PRECISION's setting, fp32 unless set.

    Works on functions, functools.partial objects, callable objects and methods
    (`@jc.jit` in a class body binds `self` as a static argument)."""
    def wrap(f):
        return JitFunction(f, vector_width=vector_width, num_threads=num_threads,
                           prepack_weights=prepack_weights, constants=constants,
                           static_argnums=static_argnums, static_argnames=static_argnames,
                           dynamic=dynamic, target=target, matmul_precision=matmul_precision)
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
        node = build.input_node(name, tuple(shape), dtype)
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

    def __init__(self, graph: Graph, vector_width=None, target=None):
        self._ir = graph.to_ir()

        def fn(*args):
            raise TraceError("a compiled Graph cannot be re-traced")
        fn.__name__ = graph.name
        super().__init__(fn, vector_width=vector_width, target=target)
        self._names = [i.arg for i in self._ir.inputs]

    def _arg_names(self, count: int) -> list:
        return self._names[:count] + [f"arg{i}" for i in range(len(self._names), count)]

    def __reduce__(self):
        raise TypeError(f"{self.__name__}: a jc.compile(Graph) function cannot be pickled; "
                        "pickle a jc.jit function instead")

    def _trace(self, sigs, names, weak=None):
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


def compile(graph: Graph, vector_width=None, target=None) -> CompiledFunction:  # noqa: A001
    """Compile an explicit Graph; the result is called with arrays of the declared signature.
    vector_width and target as in `jit`."""
    return CompiledFunction(graph, vector_width=vector_width, target=target)
