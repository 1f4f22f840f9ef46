"""Tracing and the op namespace: what a jitted function calls, and what it calls it on.

One layer of the front (tests/test_architecture.py, FRONT_LAYERS), bottom up:
  tracer          Tracer, the value a traced function sees instead of an array (one IR node)
  spellings       the one table of op spellings: per elementwise op and reduction its jc
                  names, numpy ufuncs and functions, Tracer operator or method, ATen overloads
  core            the jc functions: generated from the table's rows, the custom rows with
                  logic of their own (div, where, gelu, ...), views, matmul, softmax,
                  layer_norm; `op` runs them eagerly (jitted) on plain arrays
  math            numpy's other math and statistics (arctan2, sign, var, norm, ...):
                  decompositions into the ops of `core`
  join            indexing and joining: take, concatenate, stack, split, pad, clip, cumsum
  indexing        `x[...]` on traced tensors: views and checked gathers
  pool, conv      pooling and convolution (jc.max_pool2d, jc.conv2d, jc.batch_norm, ...)
  numpy_dispatch  numpy's protocols on Tracers: `np.exp(x)` -> the jc function
  tensor_methods  Tracer's operators and methods, attached when it is imported

Adding an elementwise op: its record in ir/ops.py, its emitter in jitcore/llvm/opemit.py and
its row in ops/spellings.py (tests/test_spellings.py then tests every spelling of it).

This file imports nothing: `jitcore` imports the public names from the modules, and a module
that needs only the tracer (`jitcore.ops.tracer`) does not load the op namespace with it.
"""
