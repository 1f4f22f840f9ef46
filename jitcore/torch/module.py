"""`jitcore.torch.compile(module, *example_inputs)`: the compiled model users call."""
from __future__ import annotations

import inspect
import time

import torch
from torch.utils import _pytree as pytree

from jitcore.ir.errors import DTypeError, ShapeError

from . import threads
from .precision import report as precision_report
from .precision import resolve as resolve_precision
from .program import export_graph, fallback_nodes, fold_constants, partition


class _Symbol(str):
    """A symbolic extent of an export's input, by name (never equal to an int)."""


def _extent(d):
    """An input's extent in a signature: an int, or a symbolic one's name."""
    if isinstance(d, int):
        return d
    expr = d.node.expr
    return int(expr) if getattr(expr, "is_number", False) else _Symbol(d)


class Program:
    """One export of the module: the partitioned graph and its parts. For one input
    signature, or (`dynamic`) for every signature the export's symbolic extents admit:
    torch.export decides which extents may vary (Dim.AUTO on every axis of every tensor
    input), and the parts are jc.jit(dynamic=True) functions."""

    def __init__(self, module, args: tuple, kwargs: dict, name: str, constant_inputs=None,
                 dynamic: bool = False, precision: str | None = None):
        t0 = time.perf_counter()
        exported, self.dynamic_note = None, None
        if dynamic:
            shapes = _auto_shapes(module, args)
            try:
                exported = export_graph(module, args, kwargs, constant_inputs, shapes)
            except Exception as e:      # (export's own reasons: then one export per shape)
                self.dynamic_note = f"export with dynamic extents failed: {e}"[:300]
        if exported is None:
            exported = export_graph(module, args, kwargs, constant_inputs)
        self.ranges = exported.ranges or {}
        t1 = time.perf_counter()
        self.folded = fold_constants(exported.gm)
        self.gm = exported.gm
        self.in_spec, self.out_spec = exported.in_spec, exported.out_spec
        # (symbolic extents as their names: comparing a SymInt with an int would make torch
        # specialize the export to that int)
        self.signature = [(tuple(_extent(d) for d in p.meta["val"].shape), p.meta["val"].dtype)
                          if isinstance(p.meta.get("val"), torch.Tensor) else None
                          for p in exported.inputs]
        # plain positional tensors in, one tensor out: the call skips pytree (~15 us)
        n = pytree.tree_flatten((tuple(args), kwargs))[1].num_leaves
        self.flat_args = self.in_spec == pytree.tree_flatten((tuple(range(n)), {}))[1]
        self.single_out = self.out_spec.is_leaf()
        self.precision_note = precision_report(self.gm, precision)
        self.parts = partition(self.gm, name, dynamic, precision)
        self.fallbacks, self.views_in_torch = fallback_nodes(self.gm)
        self.decomposed = exported.decomposed
        self.seconds = {"export": t1 - t0, "partition": time.perf_counter() - t1}

    def accepts(self, sig: list) -> bool:
        """Whether a call's signature fits this export: equal ranks, dtypes and static
        extents; each symbolic extent within its range and equal wherever its symbol is."""
        if len(sig) != len(self.signature):
            return False
        bound = {}
        for got, want in zip(sig, self.signature):
            if got is None or want is None:
                if got != want:
                    return False
                continue
            if got[1] != want[1] or len(got[0]) != len(want[0]):
                return False
            for g, w in zip(got[0], want[0]):
                if isinstance(w, int):
                    if g != w:
                        return False
                    continue
                name = str(w)
                lo, hi = self.ranges.get(name, (2, None))
                if bound.setdefault(name, g) != g or g < lo or (hi is not None and g > hi):
                    return False
        return True

    def part_modules(self) -> list:
        return [getattr(self.gm, p) for p in self.parts]

    def __call__(self, flat: list):
        if self.fallbacks:                         # torch ops run between jitcore parts
            threads.match_torch_threads()
        return self.gm(*flat)


def _auto_shapes(module, args: tuple):
    """torch.export's dynamic_shapes for these arguments: Dim.AUTO on every axis of every
    tensor, shaped as export binds them to forward's parameters (a `*past` parameter takes
    one tuple for all the tensors it collects: a decode step's cache prefixes)."""
    auto = torch.export.Dim.AUTO
    shapes = pytree.tree_map(lambda t: {d: auto for d in range(t.ndim)}
                             if isinstance(t, torch.Tensor) else None, tuple(args))
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return shapes
    star = next((k for k, p in enumerate(params) if p.kind == p.VAR_POSITIONAL), None)
    if star is None or star > len(shapes):
        return shapes
    return (*shapes[:star], tuple(shapes[star:]))


def _signature_of(flat: list) -> list:
    return [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None for x in flat]


class CompiledModule:
    """A module compiled by jitcore: call it with torch tensors, get torch tensors back (the
    module's own output structure). Compiled at construction with the example inputs."""

    def __init__(self, module: torch.nn.Module, example_inputs: tuple, dynamic: bool = False,
                 constant_inputs: dict | None = None, precision: str | None = None):
        self.module, self.dynamic = module, dynamic
        # the parts' matmul_precision (None: JITCORE_MATMUL_PRECISION's; a bf16 module's
        # own: precision.resolve), checked here
        self.precision = resolve_precision(precision, module, constant_inputs)
        self.__name__ = type(module).__name__
        self._constant_inputs = constant_inputs
        t0 = time.perf_counter()
        self._programs = {}
        self._last_signature = None        # the last call's, when its program is symbolic
        self._program = self._build(example_inputs)
        self._program(self._flat(example_inputs, self._program))   # traces and compiles parts
        self.compile_seconds = time.perf_counter() - t0

    def _build(self, args: tuple) -> Program:
        program = Program(self.module, args, {}, self.__name__, self._constant_inputs,
                          self.dynamic, self.precision)
        key = tuple(map(str, program.signature))
        self._programs[key] = program
        return program

    def _flat(self, args: tuple, program: Program) -> list:
        """The call's tensors in the order of the graph's inputs (those bound as constants,
        the torch.compile backend's parameters, left out)."""
        if program.flat_args and len(args) == program.in_spec.num_leaves and \
                all(isinstance(a, torch.Tensor) for a in args):
            flat, spec = list(args), program.in_spec
        else:
            flat, spec = pytree.tree_flatten((tuple(args), {}))
        if spec != program.in_spec:
            raise TypeError(f"jitcore.torch: the call's argument structure {spec} is not the "
                            f"example inputs' {program.in_spec}")
        if self._constant_inputs:
            flat = [x for k, x in enumerate(flat) if k not in self._constant_inputs]
        return flat

    def _program_for(self, args: tuple) -> tuple:
        program = self._program
        flat = self._flat(args, program)
        sig = _signature_of(flat)
        if sig == program.signature or sig == self._last_signature:
            return program, flat
        if self.dynamic:                   # a new shape: an export that admits it, or a new one
            # (the current one first: a decode step's cache length is new at every call, and
            # the signature's text for the lookup by it costs more than the check)
            program = (program if program.accepts(sig) else None) or \
                self._programs.get(tuple(map(str, sig))) or next(
                (p for p in self._programs.values() if p.accepts(sig)), None) or \
                self._build(args)
            same = program is self._program
            self._program, self._last_signature = program, sig
            return program, flat if same else self._flat(args, program)
        for k, (got, want) in enumerate(zip(sig, program.signature)):
            if got != want:
                err = DTypeError if got and want and got[1] != want[1] else ShapeError
                raise err(f"jitcore.torch: {self.__name__} input {k} is {got}, compiled for "
                          f"{want} (compile with dynamic=True for shapes that vary)")
        raise ShapeError(f"jitcore.torch: {self.__name__} takes {len(program.signature)} "
                         f"inputs, got {len(sig)}")

    def __call__(self, *args):
        program, flat = self._program_for(args)
        out = program(flat)
        return out[0] if program.single_out else pytree.tree_unflatten(list(out),
                                                                      program.out_spec)

    # -- looking inside -------------------------------------------------------------------------
    @property
    def fallbacks(self) -> list:
        """(node, ATen op, why) for every node that runs in torch."""
        return list(self._program.fallbacks)

    def _examples(self):
        for name, pm in zip(self._program.parts, self._program.part_modules()):
            yield name, pm.part, pm.example

    def graph(self) -> str:
        """The jitcore IR of every compiled part, as text, and the torch-side graph."""
        texts = [f"# {name}\n{part.graph(*ex)}" for name, part, ex in self._examples()]
        return "\n\n".join(texts + [f"# torch-side graph\n{self._program.gm.graph}"])

    def kernels(self) -> list:
        """The fused kernels of every compiled part, in order."""
        return [k for _, part, ex in self._examples() for k in part.kernels(*ex)]

    def llvm_ir(self, optimized: bool = True) -> str:
        return "\n".join(part.llvm_ir(*ex, optimized=optimized) for _, part, ex in self._examples())

    def explain(self) -> str:
        """The fallback nodes (with why), then per part its kernels, bytes, flops, compile time."""
        p = self._program
        lines = [f"jitcore.torch: {self.__name__}: {len(p.parts)} compiled part(s), "
                 f"{len(p.fallbacks)} fallback node(s), {p.folded} constant node(s) folded; "
                 f"export {p.seconds['export']:.2f} s, compile total {self.compile_seconds:.2f} s"]
        lines.append("export: " + ("the graph as exported (no core-ATen decomposition)"
                                   if p.decomposed is None else
                                   f"core-ATen decompositions ({p.decomposed})"))
        if p.fallbacks:
            lines.append("fallback nodes (run in torch):")
            lines += [f"  {n}: {op}: {why}" for n, op, why in p.fallbacks]
        if p.precision_note:
            lines.append(p.precision_note)
        if p.dynamic_note:
            lines.append(f"dynamic=True: {p.dynamic_note}")
        if p.views_in_torch:
            lines.append(f"views left in torch (no data moved): {', '.join(p.views_in_torch)}")
        for name, part, ex in self._examples():
            lines.append(f"\n== {name} ==")
            lines.append(part.explain(*ex))
        return "\n".join(lines)

    def __repr__(self):
        return (f"<jitcore.torch {self.__name__}: {len(self._program.parts)} part(s), "
                f"{len(self._program.fallbacks)} fallback node(s)>")


def compile(module: torch.nn.Module, *example_inputs, dynamic: bool = False,  # noqa: A001
            precision: str | None = None) -> CompiledModule:
    """Compile `module` (its eval form) for inputs like `example_inputs`.

    torch.export gives the graph (decomposed to core ATen unless every node lowers as
    exported: training_ir.py); parameters and buffers become
    constants (weights prepacked, constant subgraphs folded); supported nodes compile into
    jitcore graphs, the rest run in torch (`explain()` lists them). Call the result with torch
    tensors: they are read in place, outputs wrap jitcore's arrays without copies.
    dynamic=True: exported once with dynamic extents (torch.export's Dim.AUTO on every axis;
    export keeps static what the model fixes), and the parts are jc.jit(dynamic=True): calls
    with another batch size reuse the export and the compiled code; another sequence length
    reuses the export and compiles the parts for it (a sequence axis is not a leading one);
    a shape the export does not admit exports again. dynamic=False: a new shape raises
    ShapeError.
    precision="bf16": the policy of jitcore/torch/precision.py (torch autocast's CPU policy
    as the reference): the float32 matmuls, linears and convolutions (not depthwise ones)
    multiply bf16-rounded operands (weights converted and prepacked as bf16 pairs at compile
    time, `vdpbf16ps` where the CPU has AVX512_BF16, else a slower float32 fallback on the
    same values) and accumulate in float32; softmax, norms, reductions and every other op
    stay float32 (jc.jit's matmul_precision); explain() lists which ops are which. None: the
    setting of JITCORE_MATMUL_PRECISION (fp32 unless set), except that a module already in
    bf16 (`model.to(torch.bfloat16)`) runs as given, its matmuls on the bf16 kernels.
    The module's parameters and buffers are read once, here: weights changed afterwards are
    not seen (compile again). Each submodule keeps the training flag it had.
    """
    return CompiledModule(module, example_inputs, dynamic, precision=precision)
