"""The intra-op thread pool, emitted as LLVM IR that calls pthreads (no C compiler needed).

State machine (one process-wide pool, all state in the module's globals):
  - workers are created lazily, once, by the first parallel region that needs them;
  - a region publishes a job (kernel, bufs, extent, fine chunks: ~CHUNKS_PER_THREAD per
    thread, none under the kernel's grain), its chunk count (generation << 32 | count) and
    its cursor (generation << 32 | chunk 0), then writes the generation into the `go` word
    of each worker it wants; such a worker claims chunks of that generation by
    compare-and-swap on the cursor until none are left;
  - the caller claims chunks too, then waits only until every chunk is finished (`job_done`):
    never for a worker as such. A worker the OS has not run yet (its core busy with another
    process) simply finds nothing left to claim, so a region costs at most one chunk of delay
    for a preempted worker; a worker that wakes late sees another generation and claims
    nothing of the old region;
  - waiting is a bounded spin (pause, with a sched_yield now and then so a waiter that shares
    its core with the thread doing the work lets it run), then a futex sleep: on 2 cores, two
    runtimes that both busy-wait halve each other, so workers yield the core soon after a
    region ends;
  - a region entered while another runs (a nested call, another Python thread, a forked task)
    never waits for the pool: it runs inline on its own thread (`busy` is taken by CAS).
Kernel ABI: `void kernel(i64 start, i64 stop, i8** bufs)`.

Exported: jc_parallel_for, jc_set_num_threads, jc_pool_workers, jc_after_fork_child (and the
inter-op task pool of tasks_ir: jc_task_spawn, jc_task_wait, ...).
"""
from __future__ import annotations

import platform

from llvmlite import ir

I32, I64 = ir.IntType(32), ir.IntType(64)
I8P = ir.IntType(8).as_pointer()
KERNEL_PTR = ir.FunctionType(ir.VoidType(), [I64, I64, I8P.as_pointer()]).as_pointer()

SPIN_ITERATIONS = 4000       # ~50-100 us of `pause` before a waiter sleeps in the kernel
YIELD_EVERY = 64             # spins between two sched_yield calls (a power of two)
CHUNKS_PER_THREAD = 16       # fine chunks: a late or preempted thread holds up little work
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
SYS_FUTEX = {"x86_64": 202, "AMD64": 202, "aarch64": 98, "arm64": 98}
MAX_WORKERS = 256

EXPORTS = ("jc_parallel_for", "jc_set_num_threads", "jc_pool_workers", "jc_after_fork_child",
           "jc_pool_empty_region", "jc_pool_noop_call",
           "jc_task_spawn", "jc_task_wait", "jc_set_interop_threads", "jc_task_workers",
           "jc_tasks_inflight")


class PoolModule:
    def __init__(self):
        self.m = ir.Module(name="jitcore_runtime")
        g = self._global
        self.nthreads, self.nworkers, self.busy = g("nthreads", I32, 1), g("nworkers", I32), \
            g("busy", I32)
        self.gen = g("gen", I32)
        # the running region: its chunks are claimed from `job_cursor` = (region generation
        # << 32) | next chunk index, by compare-and-swap, below `job_limit` = (generation
        # << 32) | chunk count; both carry the generation, so a claim can only ever take a
        # chunk of the region it was woken for; `job_done` counts finished chunks
        self.job_cursor, self.job_limit = g("job_cursor", I64), g("job_limit", I64)
        self.job_done, self.caller_asleep = g("job_done", I32), g("caller_asleep", I32)
        self.go = g("go", ir.ArrayType(I32, MAX_WORKERS))          # per worker: job to run
        self.asleep = g("asleep", ir.ArrayType(I32, MAX_WORKERS))  # per worker: in futex wait
        self.job_fn, self.job_bufs = g("job_fn", KERNEL_PTR), g("job_bufs", I8P.as_pointer())
        self.job_extent, self.job_chunk = g("job_extent", I64), g("job_chunk", I64)
        # forked tasks queued or running on inter-op workers: each holds a core, so a region
        # leaves that many of its workers out (no oversubscription while tasks run)
        self.tasks_inflight = g("tasks_inflight", I32)
        self.syscall = ir.Function(self.m, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
        self.pthread_create = ir.Function(self.m, ir.FunctionType(
            I32, [I64.as_pointer(), I8P, ir.FunctionType(I8P, [I8P]).as_pointer(), I8P]),
            "pthread_create")
        self.pthread_detach = ir.Function(self.m, ir.FunctionType(I32, [I64]), "pthread_detach")
        self.pthread_setname = ir.Function(self.m, ir.FunctionType(I32, [I64, I8P]),
                                           "pthread_setname_np")
        self.sched_yield = ir.Function(self.m, ir.FunctionType(I32, []), "sched_yield")
        self.sys_futex = SYS_FUTEX.get(platform.machine(), 202)
        self.x86 = platform.machine() in ("x86_64", "AMD64")

    def _global(self, name, ty, init=0):
        gv = ir.GlobalVariable(self.m, ty, f"jc_pool_{name}")
        gv.linkage = "internal"
        zero = None if isinstance(ty, (ir.PointerType, ir.ArrayType)) else init
        gv.initializer = ir.Constant(ty, zero)
        return gv

    def name_thread(self, b, tid, name: str):
        """Give a new thread a name that `top -H` and /proc/<pid>/task/*/comm show."""
        data = bytearray(name.encode() + b"\0")
        gv = ir.GlobalVariable(self.m, ir.ArrayType(ir.IntType(8), len(data)),
                               f"jc_name_{name.replace('-', '_')}")
        gv.linkage, gv.global_constant = "internal", True
        gv.initializer = ir.Constant(gv.type.pointee, data)
        b.call(self.pthread_setname, [tid, b.bitcast(gv, I8P)])

    # -- primitives ---------------------------------------------------------------------------
    def function(self, name, ret, args, internal=True):
        fn = ir.Function(self.m, ir.FunctionType(ret, args), name)
        if internal:
            fn.linkage = "internal"
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    def pause(self, b):
        if self.x86:
            fn = self.m.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(
                ir.VoidType(), []))
            b.call(fn, [])

    def futex(self, b, addr, op, val):
        b.call(self.syscall, [I64(self.sys_futex), addr, I32(op), val,
                              ir.Constant(I8P, None)])

    def load(self, b, gv, order="acquire"):
        return b.load_atomic(gv, order, 4 if gv.type.pointee == I32 else 8)

    @staticmethod
    def alloca(b, ty):
        with b.goto_entry_block():
            return b.alloca(ty)

    def slot(self, b, array, index):
        return b.gep(array, [I32(0), index])

    def wait_while_equal(self, b, word, value, asleep=None):
        """Spin while *word == value, then sleep on the futex until it changes. `asleep`,
        if given, is set while sleeping so that a waker knows a syscall is needed."""
        fn = b.function
        spins = self.alloca(b, I32)
        b.store(I32(0), spins)
        check, spin, sleep, done = (fn.append_basic_block(n) for n in
                                    ("w.check", "w.spin", "w.sleep", "w.done"))
        b.branch(check)
        b.position_at_end(check)
        cur = self.load(b, word)
        b.cbranch(b.icmp_unsigned("!=", cur, value), done, spin)
        b.position_at_end(spin)
        n = b.load(spins)
        with b.if_then(b.icmp_unsigned("<", n, I32(SPIN_ITERATIONS))):
            b.store(b.add(n, I32(1)), spins)
            self.pause(b)
            # now and then let another thread of this core run: with a core busy elsewhere,
            # a waiter may share its core with the very thread that does the work
            with b.if_then(b.icmp_unsigned("==", b.and_(n, I32(YIELD_EVERY - 1)),
                                           I32(YIELD_EVERY - 1))):
                b.call(self.sched_yield, [])
            b.branch(check)
        b.branch(sleep)
        b.position_at_end(sleep)
        if asleep is not None:
            b.store_atomic(I32(1), asleep, "seq_cst", 4)
        self.futex(b, word, FUTEX_WAIT_PRIVATE, value)      # returns at once if changed
        if asleep is not None:
            b.store_atomic(I32(0), asleep, "seq_cst", 4)
        b.branch(check)
        b.position_at_end(done)
        return cur

    # -- functions ----------------------------------------------------------------------------
    def run_chunks(self):
        """`run_chunks(gen)`: claim chunks of region `gen` (compare-and-swap on the cursor)
        and run them until none are left or the region is over; each finished chunk counts
        in `job_done`, and the last one wakes the caller if it sleeps. A thread that claims
        nothing leaves no trace: the caller never waits for a thread, only for claimed
        chunks."""
        fn, b = self.function("jc_pool_run_chunks", ir.VoidType(), [I32])
        gen = b.zext(fn.args[0], I64)
        loop, claim, body, done = (fn.append_basic_block(n) for n in
                                   ("loop", "claim", "body", "done"))
        b.branch(loop)
        b.position_at_end(loop)
        cur = b.load_atomic(self.job_cursor, "acquire", 8)
        # the count must be this region's too: the next region stores its count before its
        # cursor, so a late thread may read the old cursor (all claimed) with the new,
        # larger count; claiming on that would run a chunk of the new region twice and
        # count it twice in `job_done`, and its caller would wait forever for a count it
        # has passed
        limit = b.load_atomic(self.job_limit, "monotonic", 8)
        nchunks = b.and_(limit, I64(0xFFFFFFFF))
        index = b.and_(cur, I64(0xFFFFFFFF))
        ours = b.and_(b.and_(b.icmp_unsigned("==", b.lshr(cur, I64(32)), gen),
                             b.icmp_unsigned("==", b.lshr(limit, I64(32)), gen)),
                      b.icmp_signed("<", index, nchunks))
        b.cbranch(ours, claim, done)
        b.position_at_end(claim)
        took = b.extract_value(b.cmpxchg(self.job_cursor, cur, b.add(cur, I64(1)), "acq_rel",
                                         "acquire"), 1)
        b.cbranch(took, body, loop)
        b.position_at_end(body)
        # the region cannot end before this chunk is counted: its job fields are stable
        chunk, extent = b.load(self.job_chunk), b.load(self.job_extent)
        start = b.mul(index, chunk)
        end = b.add(start, chunk)
        stop = b.select(b.icmp_signed("<", end, extent), end, extent)
        b.call(b.load(self.job_fn), [start, stop, b.load(self.job_bufs)])
        prev = b.atomic_rmw("add", self.job_done, I32(1), "seq_cst")
        last = b.icmp_unsigned("==", b.zext(b.add(prev, I32(1)), I64), nchunks)
        with b.if_then(last):
            with b.if_then(b.icmp_unsigned("!=", self.load(b, self.caller_asleep, "seq_cst"),
                                           I32(0))):
                self.futex(b, self.job_done, FUTEX_WAKE_PRIVATE, I32(1))
        b.branch(loop)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def worker(self, run_chunks):
        """Thread body. arg = (its `go` word at creation << 32) | worker index."""
        fn, b = self.function("jc_pool_worker", I8P, [I8P])
        arg = b.ptrtoint(fn.args[0], I64)
        index = b.trunc(arg, I32)
        go, asleep = self.slot(b, self.go, index), self.slot(b, self.asleep, index)
        seen = self.alloca(b, I32)
        b.store(b.trunc(b.lshr(arg, I64(32)), I32), seen)
        top = fn.append_basic_block("top")
        b.branch(top)
        b.position_at_end(top)
        gen = self.wait_while_equal(b, go, b.load(seen), asleep)
        b.store(gen, seen)
        b.call(run_chunks, [gen])
        b.branch(top)
        return fn

    def ensure_workers(self, b, wanted, worker):
        """Create workers up to `wanted` (once; detached). Returns how many exist."""
        fn = b.function
        tid = self.alloca(b, I64)
        check, create, done = (fn.append_basic_block(n) for n in ("c.check", "c.create", "c.done"))
        b.branch(check)
        b.position_at_end(check)
        have = b.load(self.nworkers)
        b.cbranch(b.icmp_signed("<", have, wanted), create, done)
        b.position_at_end(create)
        current = b.zext(self.load(b, self.slot(b, self.go, have)), I64)
        arg = b.inttoptr(b.or_(b.shl(current, I64(32)), b.zext(have, I64)), I8P)
        rc = b.call(self.pthread_create, [tid, ir.Constant(I8P, None), worker, arg])
        ok = fn.append_basic_block("c.ok")
        b.cbranch(b.icmp_unsigned("==", rc, I32(0)), ok, done)   # no thread: use fewer
        b.position_at_end(ok)
        self.name_thread(b, b.load(tid), "jitcore-intra")
        b.call(self.pthread_detach, [b.load(tid)])
        b.store(b.add(have, I32(1)), self.nworkers)
        b.branch(check)
        b.position_at_end(done)
        return b.load(self.nworkers)

    def wake(self, b, parts, gen):
        """Give each of the first `parts` workers the region's generation; wake those asleep."""
        i = self.alloca(b, I32)
        b.store(I32(0), i)
        fn = b.function
        check, body, done = (fn.append_basic_block(n) for n in ("g.check", "g.body", "g.done"))
        b.branch(check)
        b.position_at_end(check)
        k = b.load(i)
        b.cbranch(b.icmp_signed("<", k, parts), body, done)
        b.position_at_end(body)
        go = self.slot(b, self.go, k)
        b.store_atomic(gen, go, "seq_cst", 4)                 # publishes the job (release)
        with b.if_then(b.icmp_unsigned("!=", self.load(b, self.slot(b, self.asleep, k),
                                                       "seq_cst"), I32(0))):
            self.futex(b, go, FUTEX_WAKE_PRIVATE, I32(1))
        b.store(b.add(k, I32(1)), i)
        b.branch(check)
        b.position_at_end(done)

    def parallel_for(self, run_chunks, worker):
        fn, b = self.function("jc_parallel_for", ir.VoidType(),
                              [KERNEL_PTR, I64, I64, I8P.as_pointer(), I32], internal=False)
        kernel, extent, grain, bufs, threads = fn.args
        inline, pooled, solo = (fn.append_basic_block(n) for n in ("inline", "pooled", "solo"))
        setting = self.load(b, self.nthreads, "monotonic")     # threads == 0: the setting
        nt = b.select(b.icmp_signed(">", threads, I32(0)), threads, setting)
        small = b.or_(b.icmp_signed("<=", nt, I32(1)), b.icmp_signed("<=", extent, grain))
        go = fn.append_basic_block("try")
        b.cbranch(small, inline, go)
        b.position_at_end(go)
        took = b.extract_value(b.cmpxchg(self.busy, I32(0), I32(1), "acquire", "monotonic"), 1)
        b.cbranch(took, pooled, inline)          # busy: nested or concurrent region -> inline

        b.position_at_end(inline)
        with b.if_then(b.icmp_signed(">", extent, I64(0))):
            b.call(kernel, [I64(0), extent, bufs])
        b.ret_void()

        b.position_at_end(pooled)
        have = self.ensure_workers(b, b.sub(nt, I32(1)), worker)
        avail = b.select(b.icmp_signed("<", have, b.sub(nt, I32(1))), have, b.sub(nt, I32(1)))
        avail = b.sub(avail, self.load(b, self.tasks_inflight, "monotonic"))
        avail = b.select(b.icmp_signed("<", avail, I32(0)), I32(0), avail)
        threads = b.zext(b.add(avail, I32(1)), I64)
        per_thread = b.mul(threads, I64(CHUNKS_PER_THREAD))
        per = b.sdiv(b.add(extent, b.sub(per_thread, I64(1))), per_thread)
        chunk = b.select(b.icmp_signed("<", per, grain), grain, per)
        chunk = b.select(b.icmp_signed("<", chunk, I64(1)), I64(1), chunk)
        nchunks = b.sdiv(b.add(extent, b.sub(chunk, I64(1))), chunk)
        extra = b.trunc(b.sub(nchunks, I64(1)), I32)
        parts = b.select(b.icmp_signed("<", avail, extra), avail, extra)
        publish = fn.append_basic_block("publish")
        b.cbranch(b.icmp_signed("<=", parts, I32(0)), solo, publish)
        b.position_at_end(publish)
        gen = b.add(b.atomic_rmw("add", self.gen, I32(1), "monotonic"), I32(1))
        for gv, v in ((self.job_fn, kernel), (self.job_bufs, bufs), (self.job_extent, extent),
                      (self.job_chunk, chunk), (self.job_done, I32(0))):
            b.store(v, gv)
        tag = b.shl(b.zext(gen, I64), I64(32))
        b.store_atomic(b.or_(tag, nchunks), self.job_limit, "monotonic", 8)
        b.store_atomic(tag, self.job_cursor, "release", 8)
        self.wake(b, parts, gen)
        b.call(run_chunks, [gen])
        self._wait_for_chunks(b, b.trunc(nchunks, I32))
        b.store_atomic(I32(0), self.busy, "release", 4)
        b.ret_void()

        b.position_at_end(solo)                  # too few chunks to share: run it here
        b.call(kernel, [I64(0), extent, bufs])
        b.store_atomic(I32(0), self.busy, "release", 4)
        b.ret_void()
        return fn

    def _wait_for_chunks(self, b, nchunks):
        """The caller: wait until every chunk is finished (only chunks other threads claimed
        and still run are left by now)."""
        fn = b.function
        check, wait, done = (fn.append_basic_block(n) for n in ("z.check", "z.wait", "z.done"))
        b.branch(check)
        b.position_at_end(check)
        cur = self.load(b, self.job_done)
        b.cbranch(b.icmp_unsigned("==", cur, nchunks), done, wait)
        b.position_at_end(wait)
        self.wait_while_equal(b, self.job_done, cur, self.caller_asleep)
        b.branch(check)
        b.position_at_end(done)

    def small_exports(self, tasks):
        fn, b = self.function("jc_set_num_threads", ir.VoidType(), [I32], internal=False)
        b.store_atomic(fn.args[0], self.nthreads, "monotonic", 4)
        b.ret_void()
        fn, b = self.function("jc_pool_workers", I32, [], internal=False)
        b.ret(b.load(self.nworkers))
        # for the fork/join benchmark: a region of one empty iteration per thread
        noop, nb = self.function("jc_pool_noop", ir.VoidType(), [I64, I64, I8P.as_pointer()])
        nb.ret_void()
        fn, b = self.function("jc_pool_empty_region", ir.VoidType(), [], internal=False)
        nt = b.zext(self.load(b, self.nthreads, "monotonic"), I64)
        b.call(self.m.get_global("jc_parallel_for"), [noop, nt, I64(1),
                                                       ir.Constant(I8P.as_pointer(), None),
                                                       I32(0)])
        b.ret_void()
        fn, b = self.function("jc_pool_noop_call", ir.VoidType(), [], internal=False)
        b.call(noop, [I64(0), I64(1), ir.Constant(I8P.as_pointer(), None)])   # the baseline
        b.ret_void()
        # in a child after fork() only the forking thread exists: forget the workers
        fn, b = self.function("jc_after_fork_child", ir.VoidType(), [], internal=False)
        for gv in (self.nworkers, self.busy, self.job_done, self.caller_asleep,
                   self.tasks_inflight):
            b.store(I32(0), gv)
        tasks.after_fork_child(b)
        b.ret_void()
