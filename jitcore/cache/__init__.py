"""jitcore's caches: every layer, its key and what drops an entry, in one place.

  lru          the bounded LRU behind the in-memory layers (JITCORE_CACHE_SIZE entries)
  fingerprint  the one source fingerprint every disk cache key ends with
  disk         the disk cache of machine code, kernel IR and whole graphs
  outputs      the cache of large output buffers

The layers, from a call down to machine code:

  1. call plans, per jitted function (api.JitFunction `_plans`, an LRU): signature ->
     call.plan.CallPlan. Key: call.dispatch.plan_key, (shape, strides, dtype) of each
     argument and the type of each Python scalar. Also `_classes` (dynamic=True shape
     classes) and `_variants` (static arguments' values -> a JitFunction of the rest).
     Bounded by JITCORE_CACHE_SIZE; dropped with the function and by api.forget_plans().
  2. eager ops (eager `_CACHE`, an LRU): an op on plain arrays -> its jitted function. Key:
     the op, the array positions and the other arguments' values and types.
  3. compiled graphs (compiler `_CACHE`, an LRU): compiler.cache_key, (graph text, input
     strides, target key, threads, prepacking, jitcore version). In one process the
     sources cannot change, so no fingerprint.
  4. kernel IR generated in this process (llvm/graph_module `_EMITTED`): by the kernel's
     structure (passes/kernel_key.py) and target settings; 16 MB of IR text, oldest out.
  5. built objects (llvm/engine `OBJECTS`): by (target machine, the module's disk key or
     the SHA-256 of its IR text); 64 MB, oldest out.
  6. the disk cache (disk.py), across processes. Every key is a SHA-256 of what the entry is
     built from, the target key and `fingerprint(scope, target_key)` (fingerprint.py: the
     scope's source files, the llvmlite, LLVM and jitcore versions, the target):
       - a module's object code (disk.Entry), by its IR text and exports; scope ENGINE
         (the code between IR text and machine code);
       - a kernel's generated IR (disk.KernelIR), by its structure and the host's cache
         sizes (`host_caches`: GEMM/conv blocking); scope BACKEND (ir, passes, runtime,
         llvm);
       - a whole graph's manifest (disk.GraphEntry), by compiler._code_key; scope DRIVER
         (the backend plus the compile driver and the disk cache);
       - a module's recipe (disk.ModuleRecipe: the thread pool's runtime), by what its IR
         is generated from; scope BACKEND.
     Entries are also checksummed and bound to their target (a damaged or foreign one is
     removed and rebuilt) and evicted least recently used past JITCORE_DISK_CACHE_MB.
  7. output buffers (outputs.py): idle blocks of large outputs, by size; not code.
     JITCORE_OUTPUT_CACHE_MB.
  8. pickling (jitcore/pickling.py) carries no compiled code: the receiving process
     compiles, or finds its code in layers 3-6.

A disk entry is invalidated by its key alone: editing any source file its scope covers,
another llvmlite or LLVM, another jitcore version or another target gives new keys, and the
old entries age out.
"""
