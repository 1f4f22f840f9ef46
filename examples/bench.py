"""The benchmark suite against peers; the same as `python -m jitcore bench` (see
jitcore/bench/cli.py for the options), runnable from a checkout:

    python examples/bench.py [--only chain,softmax] [--threads 1,2] [--runs 3]
                             [--json out.json] [--plot out.png]
"""
import sys

from jitcore.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
