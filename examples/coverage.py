"""Vectorization coverage of the realistic graph suite (tests/graph_suite.py).

    python examples/coverage.py [-v]

Jits every graph of the suite on its inputs and prints one row per graph: its number of fused
kernels, how many of them are vectorized, and why the others stay scalar; then the suite-wide
figure, e.g. `coverage: 57/58 kernels vectorized (98.3%)`. With -v it also prints
`f.explain(...)` (graph, kernels, vector width, bytes, flops, compile time) for every graph.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]      # jitcore, and the suite with its helpers

import jitcore as jc  # noqa: E402
from graph_suite import SUITE  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also print f.explain(...) for every graph")
    verbose = parser.parse_args().verbose

    width = max(len(case.name) for case in SUITE)
    print(f"{'graph':{width}s}  kernels  vectorized  scalar kernels (reason)")
    total = vectorized = 0
    for case in SUITE:
        fn, args = jc.jit(case.fn), case.inputs()
        kernels = fn.kernels(*args)
        scalar = [f"{k.name} ({k.reason})" for k in kernels if not k.vectorized]
        total += len(kernels)
        vectorized += len(kernels) - len(scalar)
        print(f"{case.name:{width}s}  {len(kernels):7d}  {len(kernels) - len(scalar):10d}  "
              f"{', '.join(scalar)}")
        if verbose:
            print(fn.explain(*args), end="\n\n")
    print(f"coverage: {vectorized}/{total} kernels vectorized ({vectorized / total:.1%})")


if __name__ == "__main__":
    main()
