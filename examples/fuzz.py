"""Differential fuzzing: random float and integer tensor programs (tests/test_random_graphs.py's
hypothesis strategies: elementwise ops, broadcasts, views, reductions, mixed dtypes) jitted and
compared with numpy, N of each. On a mismatch or a crash of the compiler hypothesis shrinks the
program and the error shows the minimal program and jitcore's graph (IR text).

    python examples/fuzz.py [--n 2000] [--seed 7]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_random_graphs as rg  # noqa: E402  (the strategies live with the tests)

SUITES = {
    "float": (lambda: rg.programs(), rg.test_random_programs_match_numpy),
    "int": (lambda: rg.programs("int"), rg.test_random_integer_programs_match_numpy_exactly),
}


def fuzz(name: str, n: int, rng_seed: int | None) -> float:
    strategy, test = SUITES[name]
    run = settings(max_examples=n, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))(
        given(strategy())(test.hypothesis.inner_test))
    if rng_seed is not None:
        run = seed(rng_seed)(run)
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="programs per suite")
    ap.add_argument("--seed", type=int, help="hypothesis seed (default: random)")
    opts = ap.parse_args()
    for name in SUITES:
        print(f"{name} programs: {opts.n} ...", flush=True)
        try:
            seconds = fuzz(name, opts.n, opts.seed)
        except AssertionError as e:
            print(f"FAILED ({name}): minimal failing program:\n{e}")
            return 1
        print(f"  {opts.n} programs matched numpy in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
