"""The LLVM backend: target selection, codegen with llvmlite.ir, vector math, the JIT engine."""
