"""Graph passes: decomposition, simplification, lowering to loop nests, vectorization legality."""
from .kernel import Kernel
from .legality import REASONS, coverage
from .lower import LoweredGraph, lower
from .pipeline import run_pipeline

__all__ = ["Kernel", "REASONS", "coverage", "LoweredGraph", "lower", "run_pipeline"]
