"""Differential fuzzing: random float and integer tensor programs (tests/test_random_graphs.py's
hypothesis strategies: elementwise ops and composites, casts, comparisons and logic,
broadcasts, views, empty dims, reductions, 2-D / batched / 1-D matmuls and forked tasks)
jitted and compared with numpy, N of each; then N of each chunked over two threads
against one thread (identical bits). On a mismatch or a crash of the compiler
hypothesis shrinks the program and the error shows the minimal program and jitcore's graph
(IR text). At the end, how many programs had each feature.

    python examples/fuzz.py [--n 2000] [--seed 7] [--only float,int,float-threads,int-threads]
                            [--large]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_random_graphs as rg  # noqa: E402  (the strategies live with the tests)

SUITES = {
    "float": (lambda: rg.programs(), rg.test_random_programs_match_numpy),
    "int": (lambda: rg.programs("int"), rg.test_random_integer_programs_match_numpy_exactly),
    # the same programs chunked over 2 threads vs 1 thread: identical bits
    "float-threads": (lambda: rg.programs(),
                      rg.test_random_programs_give_the_same_bits_on_one_and_two_threads),
    "int-threads": (lambda: rg.programs("int"),
                    rg.test_random_integer_programs_give_the_same_bits_on_one_and_two_threads),
}


def features(program) -> set:
    """What a program exercises, for the coverage counts."""
    found = {"empty input"} if any(0 in s for s in program.input_shapes) else set()
    for step, vals, _ in rg.walk(program):
        inner = step[1] if step[0] == "fork" else step
        found |= {"fork"} if step[0] == "fork" else set()
        if inner[0] == "matmul":
            batched = max(vals[inner[1]].ndim, vals[inner[2]].ndim) > 2
            found.add("batched matmul" if batched else "matmul")
        found |= {FEATURE[inner[0]]} if inner[0] in FEATURE else set()
        if inner[0] == "unary" and inner[1] in rg.ROW_OPS:
            found.add("softmax/log_softmax/layer_norm")
        if len(inner) > 1 and inner[1] in rg.BITWISE + ["invert"]:
            found.add("shift" if "shift" in inner[1] else "bitwise")
        if inner[0] == "astype" and vals[inner[1]].dtype.kind == "f" \
                and np.dtype(inner[2]).kind in "iu":
            found.add("float->int cast")
    return found


FEATURE = {"compare": "bool values", "logic": "bool values", "not": "bool values",
           "invert": "bool values", "where": "bool values", "astype": "cast", "reduce": "reduction",
           "transpose": "view", "slice": "view", "reshape": "view", "broadcast_to": "view"}


def fuzz(name: str, n: int, rng_seed: int | None, counts: Counter) -> float:
    strategy, test = SUITES[name]

    def counted(program):
        counts.update(features(program))
        counts["programs"] += 1
        test.hypothesis.inner_test(program)

    run = settings(max_examples=n, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))(given(strategy())(counted))
    if rng_seed is not None:
        run = seed(rng_seed)(run)
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="programs per suite")
    ap.add_argument("--seed", type=int, help="hypothesis seed (default: random)")
    ap.add_argument("--only", help=f"comma-separated suites of {','.join(SUITES)}")
    ap.add_argument("--large", action="store_true",
                    help="dims up to 1000 and values up to 400,000 elements (GEMM blocking, "
                         "parallel chunks, tiles at their real sizes)")
    opts = ap.parse_args()
    if opts.large:                       # larger dims first: hypothesis favours early choices
        rg.DIMS, rg.MAX_SIZE = [300, 129, 1000, 64, 17, 3, 1], 400_000
    for name in (opts.only.split(",") if opts.only else SUITES):
        print(f"{name} programs: {opts.n} ...", flush=True)
        counts = Counter()
        try:
            seconds = fuzz(name, opts.n, opts.seed, counts)
        except AssertionError as e:
            print(f"FAILED ({name}): minimal failing program:\n{e}")
            return 1
        print(f"  {counts.pop('programs')} programs, all passed, in {seconds:.1f} s")
        print("  " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
