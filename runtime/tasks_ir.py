"""The inter-op task pool, in the same LLVM IR module as the intra-op pool.

A compiled graph's forked sub-graph runs as a task `void task(i8** bufs)`:
  - `jc_task_spawn(task, bufs)` puts a task record in a free queue slot (CAS null -> task),
    bumps `pending` and wakes one inter-op worker; with no free slot (or no memory) the task
    runs at once on the caller;
  - an inter-op worker claims a slot (CAS task -> null), runs the task, sets `done` and wakes
    the waiter; between scans it spins briefly, then sleeps on `pending`;
  - `jc_task_wait(handle)` first tries to take the task back from its slot: a task nobody
    has started runs on the waiting thread, so nested forks can never deadlock a saturated
    pool; otherwise it waits for `done`, then frees the record.
Workers are created lazily, up to the inter-op thread count; their kernels share the one
intra-op pool (a region that finds it busy runs inline on the worker). A queued task counts in
the pool's `tasks_inflight` until it finishes: parallel regions meanwhile leave one worker out
per task, so a forked task and the main line do not oversubscribe the cores.
"""
from __future__ import annotations

from llvmlite import ir

from .pool_ir import FUTEX_WAKE_PRIVATE, I8P, I32, I64

QUEUE_SLOTS = 64
TASK_FN = ir.FunctionType(ir.VoidType(), [I8P.as_pointer()]).as_pointer()
# task record: { i32 done, i32 slot, task fn, bufs }
TASK = ir.LiteralStructType([I32, I32, TASK_FN, I8P.as_pointer()])


class _Tasks:
    def __init__(self, pool):
        self.p = pool
        g = pool._global
        self.slots = g("tq_slots", ir.ArrayType(TASK.as_pointer(), QUEUE_SLOTS))
        self.pending, self.nworkers, self.limit = g("tq_pending", I32), g("tq_nworkers", I32), \
            g("tq_limit", I32, 1)
        self.malloc = ir.Function(pool.m, ir.FunctionType(I8P, [I64]), "malloc")
        self.free = ir.Function(pool.m, ir.FunctionType(ir.VoidType(), [I8P]), "free")

    def field(self, b, task, k):
        return b.gep(task, [I32(0), I32(k)])

    def run_and_finish(self, b, task):
        """Run a task this thread owns, leave the in-flight count and mark it done (waking a
        waiter)."""
        b.call(b.load(self.field(b, task, 2)), [b.load(self.field(b, task, 3))])
        b.atomic_rmw("sub", self.p.tasks_inflight, I32(1), "seq_cst")
        done = self.field(b, task, 0)
        b.store_atomic(I32(1), done, "release", 4)
        self.p.futex(b, done, FUTEX_WAKE_PRIVATE, I32(2**31 - 1))

    def claim(self, b, index, task):
        """CAS slot[index] from task to null; true if this thread now owns the task."""
        slot = self.p.slot(b, self.slots, index)
        null = ir.Constant(TASK.as_pointer(), None)
        return b.extract_value(b.cmpxchg(slot, task, null, "acq_rel", "monotonic"), 1)

    def worker(self):
        p = self.p
        fn, b = p.function("jc_task_worker", I8P, [I8P])
        i = p.alloca(b, I32)
        top, scan, body, step, idle = (fn.append_basic_block(n) for n in
                                       ("top", "scan", "body", "step", "idle"))
        b.branch(top)
        b.position_at_end(top)
        seen = p.load(b, self.pending)
        b.store(I32(0), i)
        b.branch(scan)
        b.position_at_end(scan)
        k = b.load(i)
        b.cbranch(b.icmp_signed("<", k, I32(QUEUE_SLOTS)), body, idle)
        b.position_at_end(body)
        task = b.load_atomic(p.slot(b, self.slots, k), "acquire", 8)
        present = b.icmp_unsigned("!=", task, ir.Constant(TASK.as_pointer(), None))
        with b.if_then(present):
            with b.if_then(self.claim(b, k, task)):
                self.run_and_finish(b, task)
        b.branch(step)
        b.position_at_end(step)
        b.store(b.add(k, I32(1)), i)
        b.branch(scan)
        b.position_at_end(idle)
        p.wait_while_equal(b, self.pending, seen)
        b.branch(top)
        return fn

    def ensure_workers(self, b, worker):
        """Create workers up to the limit. Spawns race each other, so a creator first
        reserves its worker number with an atomic add (and gives it back if over)."""
        p = self.p
        fn = b.function
        tid = p.alloca(b, I64)
        check, reserve, create, ok, undo, done = (fn.append_basic_block(n) for n in (
            "t.check", "t.reserve", "t.create", "t.ok", "t.undo", "t.done"))
        b.branch(check)
        b.position_at_end(check)
        limit = p.load(b, self.limit, "monotonic")
        b.cbranch(b.icmp_signed("<", p.load(b, self.nworkers), limit), reserve, done)
        b.position_at_end(reserve)
        mine = b.atomic_rmw("add", self.nworkers, I32(1), "acq_rel")
        b.cbranch(b.icmp_signed("<", mine, limit), create, undo)
        b.position_at_end(create)
        rc = b.call(p.pthread_create, [tid, ir.Constant(I8P, None), worker,
                                       ir.Constant(I8P, None)])
        b.cbranch(b.icmp_unsigned("==", rc, I32(0)), ok, undo)
        b.position_at_end(ok)
        p.name_thread(b, b.load(tid), "jitcore-interop")
        b.call(p.pthread_detach, [b.load(tid)])
        b.branch(check)
        b.position_at_end(undo)                       # over the limit, or no thread
        b.atomic_rmw("sub", self.nworkers, I32(1), "acq_rel")
        b.branch(done)
        b.position_at_end(done)

    def spawn(self, worker):
        p = self.p
        fn, b = p.function("jc_task_spawn", I8P, [TASK_FN, I8P.as_pointer()], internal=False)
        raw = b.call(self.malloc, [I64(24)])
        nomem, have_mem = fn.append_basic_block("nomem"), fn.append_basic_block("mem")
        b.cbranch(b.icmp_unsigned("==", raw, ir.Constant(I8P, None)), nomem, have_mem)
        b.position_at_end(nomem)                     # no record: just run it now
        b.call(fn.args[0], [fn.args[1]])
        b.ret(ir.Constant(I8P, None))

        b.position_at_end(have_mem)
        task = b.bitcast(raw, TASK.as_pointer())
        for k, v in ((0, I32(0)), (1, I32(-1)), (2, fn.args[0]), (3, fn.args[1])):
            b.store(v, self.field(b, task, k))
        self.ensure_workers(b, worker)
        # counted before it can be claimed, so the count never goes below zero
        b.atomic_rmw("add", self.p.tasks_inflight, I32(1), "seq_cst")
        i = p.alloca(b, I32)
        b.store(I32(0), i)
        check, body, placed, full = (fn.append_basic_block(n) for n in
                                     ("s.check", "s.body", "s.placed", "s.full"))
        b.branch(check)
        b.position_at_end(check)
        k = b.load(i)
        b.cbranch(b.icmp_signed("<", k, I32(QUEUE_SLOTS)), body, full)
        b.position_at_end(body)
        b.store(k, self.field(b, task, 1))
        slot = p.slot(b, self.slots, k)
        null = ir.Constant(TASK.as_pointer(), None)
        took = b.extract_value(b.cmpxchg(slot, null, task, "acq_rel", "monotonic"), 1)
        b.store(b.add(k, I32(1)), i)
        b.cbranch(took, placed, check)
        b.position_at_end(placed)
        b.atomic_rmw("add", self.pending, I32(1), "seq_cst")
        p.futex(b, self.pending, FUTEX_WAKE_PRIVATE, I32(1))
        b.ret(raw)
        b.position_at_end(full)                      # queue full: run it here and now
        b.store(I32(-1), self.field(b, task, 1))
        self.run_and_finish(b, task)
        b.ret(raw)

    def wait(self):
        p = self.p
        fn, b = p.function("jc_task_wait", ir.VoidType(), [I8P], internal=False)
        raw = fn.args[0]
        with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(I8P, None))):
            b.ret_void()
        task = b.bitcast(raw, TASK.as_pointer())
        index = b.load(self.field(b, task, 1))
        queued = b.icmp_signed(">=", index, I32(0))
        mine = fn.append_basic_block("mine")
        other = fn.append_basic_block("other")
        try_claim = fn.append_basic_block("try_claim")
        b.cbranch(queued, try_claim, other)
        b.position_at_end(try_claim)
        b.cbranch(self.claim(b, index, task), mine, other)
        b.position_at_end(mine)                      # nobody started it: run it here
        self.run_and_finish(b, task)
        b.branch(other)
        b.position_at_end(other)
        done = self.field(b, task, 0)
        p.wait_while_equal(b, done, I32(0))
        b.call(self.free, [raw])
        b.ret_void()

    def small_exports(self):
        p = self.p
        fn, b = p.function("jc_set_interop_threads", ir.VoidType(), [I32], internal=False)
        b.store_atomic(fn.args[0], self.limit, "monotonic", 4)
        b.ret_void()
        fn, b = p.function("jc_task_workers", I32, [], internal=False)
        b.ret(b.load(self.nworkers))
        fn, b = p.function("jc_tasks_inflight", I32, [], internal=False)
        b.ret(p.load(b, p.tasks_inflight))

    def after_fork_child(self, b):
        """In a fork() child: no inter-op workers, and no tasks of the parent's threads."""
        b.store(I32(0), self.nworkers)
        for k in range(QUEUE_SLOTS):
            b.store(ir.Constant(TASK.as_pointer(), None), self.p.slot(b, self.slots, I32(k)))


def add_tasks(pool):
    """Add the task pool's globals and functions to the runtime module of `pool`."""
    tasks = _Tasks(pool)
    tasks.spawn(tasks.worker())
    tasks.wait()
    tasks.small_exports()
    return tasks
