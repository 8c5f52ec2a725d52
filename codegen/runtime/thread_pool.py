"""A persistent native thread pool in LLVM IR, for the fork-join of parallel loops: code
of the runtime, linked into this process (the JIT's kernels call it) and into every
exported library that runs parallel loops.

The pool is one function, whose ABI kernels declare (:mod:`tegrad.codegen.kernels.fork_join`),

    void tegrad_parallel_for(void (*fn)(void *ctx, i64 begin, i64 end), void *ctx,
                             i64 n_tasks, i32 n_threads)

which splits the tasks ``[0, n_tasks)`` into ``T = min(n_threads, n_tasks, MAX_THREADS)``
contiguous ranges, range ``t`` being ``[n_tasks*t // T, n_tasks*(t+1) // T)``, and returns
when every task has run, each exactly once, as ``fn(ctx, begin, end)`` calls on chunks of
at most ``grain = ceil(n_tasks / (T * CHUNKS_PER_THREAD))`` consecutive tasks. Thread
``t`` claims the chunks of range ``t`` in increasing order (so a balanced run keeps
the static partition and its cache locality), then helps with the other ranges' chunks
left unclaimed: a thread the OS runs slower than the others (another process's thread
spinning on its core) leaves part of its range to them instead of holding every thread
up. The caller is thread 0; ``T <= 1`` runs ``fn(ctx, 0, n_tasks)`` inline, without
touching the pool. A task must not depend on which thread runs it or on the chunk it is
in, so results are the same for every thread count and schedule.

Workers are created with ``pthread_create`` on first use (as many as a call needs, up to
``MAX_THREADS - 1``) and live until the process exits. Each worker owns a word, 64 bytes
from its neighbours': idle, work offered, asleep or running. An idle worker spins on its
word (with the CPU's pause hint, yielding the core now and then) for ``SPIN_ITERATIONS``
checks, then marks it asleep and waits in ``futex`` through ``syscall``; the caller offers
the fork-join by setting the word and wakes the worker only if it was asleep. A worker
claims the offer (offered -> running) before taking chunks; after the chunks are all
claimed the caller takes back every offer still unclaimed, so a worker the OS has not
scheduled delays nothing. The caller waits for the count of pending workers by spinning,
then in ``futex``. So a fork-join
between busy threads costs no system call.

The child of a ``fork()`` has the pool's state but not its threads: a fork-join under
way in the parent left the mutex held and workers counted that do not exist there. The
process's pool (:func:`parallel_for_address`) also defines :data:`AFTER_FORK`, which
zeroes that state (no workers, mutex free, every word idle); it runs in every child
forked through ``os.fork`` (``os.register_at_fork``), whose next fork-join creates its
own workers.

One fork-join at a time: concurrent callers are serialised by a futex mutex (not
corrupted). A call from inside a range (``fn`` calling ``tegrad_parallel_for``, on the
caller's thread or a worker's) runs its tasks inline on that thread instead of waiting
for the mutex its own fork-join holds.

``emit_thread_pool(module)`` defines the pool in any ``llvmlite.ir.Module`` (an exported
library then contains it); ``declare_parallel_for(module)`` only declares it, and a module
so declared, compiled by the JIT (:mod:`tegrad.codegen.target.jit`), calls the one pool of
the process: :func:`parallel_for_address` compiles it once and registers the symbol, and
this module, imported with the package, has the JIT call it before linking such a module
(:func:`tegrad.codegen.target.jit.provide`).

>>> import ctypes
>>> addr = parallel_for_address()
>>> addr == parallel_for_address() != 0
True
"""
from __future__ import annotations

import ctypes
import functools
import os

import llvmlite.ir as ir

from tegrad.ir.errors import TegradError

from tegrad.codegen.tuning import (CALLER_SPIN_ITERATIONS, CHUNKS_PER_THREAD, SPIN_ITERATIONS,
                                  YIELD_EVERY)
from tegrad.codegen.target import jit
from tegrad.codegen.kernels.fork_join import (MAX_THREADS, PARALLEL_FOR, TASK_FN_TYPE,
                                              declare_parallel_for)
from tegrad.codegen.kernels.irutil import (I32, I64, VOIDPTR, ceil_div, counted_loop,
                                           declare as _declare, smin)

#: the name of the function that resets the process's pool in a forked child
AFTER_FORK = "tegrad_pool_after_fork"

_FUTEX_WAIT_PRIVATE = 128
_FUTEX_WAKE_PRIVATE = 129
#: the states of a worker's word
_IDLE, _WORK, _ASLEEP, _RUNNING = 0, 1, 2, 3
#: i32 words per worker slot: 64 bytes, so two workers' words share no cache line
_SLOT_WORDS = 16

#: Linux ``SYS_futex`` by target architecture (the first component of the triple)
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "arm64": 98, "riscv64": 98}

def _arch(triple):
    return triple.split("-", 1)[0]


def futex_syscall_number(triple):
    """``SYS_futex`` on a Linux target.

    >>> futex_syscall_number("x86_64-unknown-linux-gnu"), futex_syscall_number("aarch64-linux-gnu")
    (202, 98)
    """
    arch = _arch(triple)
    if "linux" not in triple or arch not in FUTEX_SYSCALL:
        raise TegradError(f"the native thread pool needs Linux on one of "
                          f"{sorted(FUTEX_SYSCALL)}; the target is {triple!r}")
    return FUTEX_SYSCALL[arch]


def _global(module, name, typ):
    g = ir.GlobalVariable(module, typ, name=name)
    g.linkage = "internal"
    g.initializer = ir.Constant(typ, None)
    g.align = 64
    return g


class _Emitter:
    """Builds the pool's globals and functions into one module for one target."""

    def __init__(self, module, triple):
        self.module = module
        self.arch = _arch(triple)
        self.sys_futex = ir.Constant(I64, futex_syscall_number(triple))
        self.syscall = _declare(module, "syscall", ir.FunctionType(I64, [I64], var_arg=True))
        self.pthread_create = _declare(module, "pthread_create", ir.FunctionType(
            I32, [I64.as_pointer(), VOIDPTR, ir.FunctionType(VOIDPTR, [VOIDPTR]).as_pointer(),
                  VOIDPTR]))
        self.pthread_detach = _declare(module, "pthread_detach", ir.FunctionType(I32, [I64]))
        self.sched_yield = _declare(module, "sched_yield", ir.FunctionType(I32, []))
        g = functools.partial(_global, module)
        self.mutex = g("tegrad_pool_mutex", ir.ArrayType(I32, _SLOT_WORDS))
        self.slots = g("tegrad_pool_slots", ir.ArrayType(I32, MAX_THREADS * _SLOT_WORDS))
        self.pending = g("tegrad_pool_pending", ir.ArrayType(I32, _SLOT_WORDS))
        self.caller_asleep = g("tegrad_pool_caller_asleep", ir.ArrayType(I32, _SLOT_WORDS))
        self.n_workers = g("tegrad_pool_n_workers", I32)
        self.owner = g("tegrad_pool_owner", I64)
        self.tids = g("tegrad_pool_worker_ids", ir.ArrayType(I64, MAX_THREADS))
        self.pthread_self = _declare(module, "pthread_self", ir.FunctionType(I64, []))
        self.task_fn = g("tegrad_pool_fn", TASK_FN_TYPE.as_pointer())
        self.task_ctx = g("tegrad_pool_ctx", VOIDPTR)
        self.n_tasks = g("tegrad_pool_n_tasks", I64)
        self.n_threads = g("tegrad_pool_n_threads", I64)
        self.grain = g("tegrad_pool_grain", I64)
        # per range, the count of its tasks claimed so far (one cache line each)
        self.claimed = g("tegrad_pool_claimed",
                         ir.ArrayType(I64, MAX_THREADS * _SLOT_WORDS // 2))

    # -- small pieces ------------------------------------------------------------------

    @staticmethod
    def word(b, array, index=0):
        return b.gep(array, [ir.Constant(I32, 0), index if isinstance(index, ir.Value)
                             else ir.Constant(I32, index)], inbounds=True)

    def slot(self, b, worker):
        """The word of ``worker`` (an i32 value)."""
        return self.word(b, self.slots, b.mul(worker, ir.Constant(I32, _SLOT_WORDS)))

    def futex(self, b, addr, op, value):
        b.call(self.syscall, [self.sys_futex, b.bitcast(addr, VOIDPTR), ir.Constant(I32, op),
                              ir.Constant(I32, value) if isinstance(value, int) else value,
                              ir.Constant(VOIDPTR, None), ir.Constant(VOIDPTR, None),
                              ir.Constant(I32, 0)])

    def pause(self, b):
        if self.arch == "x86_64":
            fn = _declare(self.module, "llvm.x86.sse2.pause", ir.FunctionType(ir.VoidType(), []))
            b.call(fn, [])
        elif self.arch in ("aarch64", "arm64"):
            fn = _declare(self.module, "llvm.aarch64.hint", ir.FunctionType(ir.VoidType(), [I32]))
            b.call(fn, [ir.Constant(I32, 1)])  # the "yield" hint

    @staticmethod
    def load(b, ptr, ordering="acquire"):
        return b.load_atomic(ptr, ordering, 4 if ptr.type.pointee == I32 else 8)

    @staticmethod
    def store(b, value, ptr, ordering="release"):
        b.store_atomic(value, ptr, ordering, 4 if ptr.type.pointee == I32 else 8)

    def spin_until(self, b, fn, ptr, done, iterations):
        """Spin ``iterations`` times on ``*ptr`` until ``done(b, value)``, yielding the
        core every :data:`YIELD_EVERY` checks; returns the block that continues (``done``
        reached: branch target ``ok``; else ``timeout``)."""
        entry = b.block
        loop = fn.append_basic_block("spin")
        ok = fn.append_basic_block("spin.ok")
        step = fn.append_basic_block("spin.step")
        give = fn.append_basic_block("spin.yield")
        again = fn.append_basic_block("spin.again")
        timeout = fn.append_basic_block("spin.timeout")
        b.branch(loop)
        b.position_at_end(loop)
        i = b.phi(I32)
        i.add_incoming(ir.Constant(I32, 0), entry)
        value = self.load(b, ptr)
        b.cbranch(done(b, value), ok, step)
        b.position_at_end(step)
        self.pause(b)
        nxt = b.add(i, ir.Constant(I32, 1))
        # A thread this one waits for may be runnable on this very core (the OS put it
        # there while another process's thread spins on the other): let it run.
        b.cbranch(b.icmp_unsigned("==", b.and_(nxt, ir.Constant(I32, YIELD_EVERY - 1)),
                                  ir.Constant(I32, 0)), give, again)
        b.position_at_end(give)
        b.call(self.sched_yield, [])
        b.branch(again)
        b.position_at_end(again)
        i.add_incoming(nxt, again)
        b.cbranch(b.icmp_signed("<", nxt, ir.Constant(I32, iterations)), loop, timeout)
        return ok, timeout

    def wait(self, b, fn, ptr, done, spins, announce, *, restart=None, after_sleep=None):
        """Wait until ``done(b, *ptr)``: spin ``spins`` checks, then ``announce(b, ok)``
        (tell the waker that this thread sleeps; it may branch to ``ok`` instead when the
        wait is over already), then sleep in ``futex`` for as long as ``*ptr`` keeps the
        value last seen. A value for which ``restart(b, value)`` holds sends the thread
        back to spinning; ``after_sleep(b)`` runs when a sleep ended the wait. Leaves
        ``b`` where the wait is over."""
        start = fn.append_basic_block("wait")
        b.branch(start)
        b.position_at_end(start)
        ok, timeout = self.spin_until(b, fn, ptr, done, spins)
        b.position_at_end(timeout)
        announce(b, ok)
        sleep = fn.append_basic_block("wait.sleep")
        check = fn.append_basic_block("wait.check")
        woken = fn.append_basic_block("wait.woken")
        b.branch(sleep)
        b.position_at_end(sleep)
        value = self.load(b, ptr, "seq_cst")
        b.cbranch(done(b, value), woken, check)
        b.position_at_end(check)
        if restart is not None:
            asleep = fn.append_basic_block("wait.futex")
            b.cbranch(restart(b, value), start, asleep)
            b.position_at_end(asleep)
        self.futex(b, ptr, _FUTEX_WAIT_PRIVATE, value)
        b.branch(sleep)
        b.position_at_end(woken)
        if after_sleep is not None:
            after_sleep(b)
        b.branch(ok)
        b.position_at_end(ok)

    # -- the mutex (three states: 0 free, 1 held, 2 held with waiters) ------------------

    def emit_lock(self, b, fn, me, nested):
        """Take the mutex; branch to ``nested`` instead when the calling thread ``me`` is
        inside a fork-join already (it holds the mutex, or it is a worker: a worker runs
        code only inside a range), where waiting would never end."""
        word = self.word(b, self.mutex)
        pair = b.cmpxchg(word, ir.Constant(I32, 0), ir.Constant(I32, 1), "acquire", "monotonic")
        got = b.extract_value(pair, 1)
        check = fn.append_basic_block("lock.check")
        contended = fn.append_basic_block("lock.contended")
        wait = fn.append_basic_block("lock.wait")
        done = fn.append_basic_block("lock.done")
        b.cbranch(got, done, check)
        b.position_at_end(check)
        owner = self.load(b, self.owner, "monotonic")
        scan_entry = b.block
        scan = fn.append_basic_block("lock.scan")
        scan_next = fn.append_basic_block("lock.scan.next")
        b.cbranch(b.icmp_unsigned("==", owner, me), nested, scan)
        b.position_at_end(scan)
        w = b.phi(I32)
        w.add_incoming(ir.Constant(I32, 1), scan_entry)
        n_workers = self.load(b, self.n_workers, "monotonic")
        in_range = b.icmp_signed("<=", w, n_workers)
        tid = self.load(b, self.word(b, self.tids, w), "monotonic")
        b.cbranch(b.and_(in_range, b.icmp_unsigned("==", tid, me)), nested, scan_next)
        b.position_at_end(scan_next)
        w_next = b.add(w, ir.Constant(I32, 1))
        w.add_incoming(w_next, scan_next)
        b.cbranch(b.icmp_signed("<", w, n_workers), scan, contended)
        b.position_at_end(contended)
        old = b.atomic_rmw("xchg", word, ir.Constant(I32, 2), "acquire")
        b.cbranch(b.icmp_unsigned("==", old, ir.Constant(I32, 0)), done, wait)
        b.position_at_end(wait)
        self.futex(b, word, _FUTEX_WAIT_PRIVATE, 2)
        old = b.atomic_rmw("xchg", word, ir.Constant(I32, 2), "acquire")
        b.cbranch(b.icmp_unsigned("==", old, ir.Constant(I32, 0)), done, wait)
        b.position_at_end(done)
        self.store(b, me, self.owner, "monotonic")

    def emit_unlock(self, b, fn):
        word = self.word(b, self.mutex)
        self.store(b, ir.Constant(I64, 0), self.owner, "monotonic")
        old = b.atomic_rmw("xchg", word, ir.Constant(I32, 0), "release")
        wake = fn.append_basic_block("unlock.wake")
        done = fn.append_basic_block("unlock.done")
        b.cbranch(b.icmp_unsigned("==", old, ir.Constant(I32, 2)), wake, done)
        b.position_at_end(wake)
        self.futex(b, word, _FUTEX_WAKE_PRIVATE, 1)
        b.branch(done)
        b.position_at_end(done)

    # -- the worker ---------------------------------------------------------------------

    def claimed_count(self, b, r):
        """The claimed-task counter of range ``r`` (an i64 value)."""
        line = b.mul(r, ir.Constant(I64, _SLOT_WORDS // 2))
        return b.gep(self.claimed, [ir.Constant(I32, 0), line], inbounds=True)

    def run_chunks(self, b, thread):
        """Claim and run chunks of the current fork-join until none is left: those of
        range ``thread`` (an i64) first, then those of the ranges after it, cyclically.

        Invariant: ``claimed[r]`` only grows; tasks ``[begin_r, begin_r + claimed[r])``
        of range ``r`` belong to the threads that added to it, each chunk to one."""
        c64 = lambda v: ir.Constant(I64, v)
        n = self.load(b, self.n_tasks, "monotonic")
        t_count = self.load(b, self.n_threads, "monotonic")
        grain = self.load(b, self.grain, "monotonic")
        fn = self.load(b, self.task_fn, "monotonic")
        ctx = self.load(b, self.task_ctx, "monotonic")
        with counted_loop(b, c64(0), t_count, name="range") as k:
            r = b.srem(b.add(thread, k), t_count)
            begin = b.sdiv(b.mul(n, r), t_count)
            end = b.sdiv(b.mul(n, b.add(r, c64(1))), t_count)
            counter = self.claimed_count(b, r)
            func = b.function
            claim = func.append_basic_block("chunk.claim")
            run = func.append_basic_block("chunk.run")
            drained = func.append_basic_block("chunk.drained")
            b.branch(claim)
            b.position_at_end(claim)
            lo = b.add(begin, b.atomic_rmw("add", counter, grain, "monotonic"))
            b.cbranch(b.icmp_signed("<", lo, end), run, drained)
            b.position_at_end(run)
            b.call(fn, [ctx, lo, smin(b, b.add(lo, grain), end)])
            b.branch(claim)
            b.position_at_end(drained)

    def report_done(self, b, fn):
        """Report one worker done: the last one wakes a sleeping caller."""
        pending = self.word(b, self.pending)
        old = b.atomic_rmw("sub", pending, ir.Constant(I32, 1), "seq_cst")
        last = b.icmp_unsigned("==", old, ir.Constant(I32, 1))
        asleep = b.icmp_unsigned("!=", self.load(b, self.word(b, self.caller_asleep), "seq_cst"),
                                 ir.Constant(I32, 0))
        wake = fn.append_basic_block("wake_caller")
        done = fn.append_basic_block("reported")
        b.cbranch(b.and_(last, asleep), wake, done)
        b.position_at_end(wake)
        self.futex(b, pending, _FUTEX_WAKE_PRIVATE, 1)
        b.branch(done)
        b.position_at_end(done)

    def emit_worker(self):
        fn = ir.Function(self.module, ir.FunctionType(VOIDPTR, [VOIDPTR]), name="tegrad_pool_worker")
        fn.linkage = "internal"
        c32 = lambda v: ir.Constant(I32, v)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        worker = b.trunc(b.ptrtoint(fn.args[0], I64), I32)
        word = self.slot(b, worker)
        idle = fn.append_basic_block("idle")
        b.branch(idle)
        b.position_at_end(idle)

        def announce(bb, offered):
            # idle -> asleep, unless work arrived meanwhile
            pair = bb.cmpxchg(word, c32(_IDLE), c32(_ASLEEP), "seq_cst", "seq_cst")
            asleep = fn.append_basic_block("asleep")
            bb.cbranch(bb.extract_value(pair, 1), asleep, offered)
            bb.position_at_end(asleep)

        # Woken idle again: the caller offered this range and ran it itself.
        self.wait(b, fn, word, lambda bb, v: bb.icmp_unsigned("==", v, c32(_WORK)),
                  SPIN_ITERATIONS, announce,
                  restart=lambda bb, v: bb.icmp_unsigned("==", v, c32(_IDLE)))
        # Claim the offer (the caller may have taken it back: then idle).
        pair = b.cmpxchg(word, c32(_WORK), c32(_RUNNING), "acq_rel", "acquire")
        run = fn.append_basic_block("run")
        b.cbranch(b.extract_value(pair, 1), run, idle)
        b.position_at_end(run)
        self.run_chunks(b, b.zext(worker, I64))
        self.store(b, c32(_IDLE), word)
        self.report_done(b, fn)
        b.branch(idle)
        return fn

    # -- the reset of a forked child ----------------------------------------------------

    def emit_after_fork(self):
        """``void AFTER_FORK()``: the pool as it was before its first fork-join (run by the
        only thread of a forked child, so plain stores)."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), []), name=AFTER_FORK)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        for g in (self.mutex, self.slots, self.pending, self.caller_asleep, self.n_workers,
                  self.owner, self.tids):
            b.store(ir.Constant(g.value_type, None), g)
        b.ret_void()
        return fn

    # -- the entry point ----------------------------------------------------------------

    def emit_parallel_for(self, worker_fn):
        fn = declare_parallel_for(self.module)
        task_fn, ctx, n_tasks, n_threads = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        tid = b.alloca(I64)
        c32 = lambda v: ir.Constant(I32, v)
        c64 = lambda v: ir.Constant(I64, v)
        t = smin(b, smin(b, b.sext(n_threads, I64), n_tasks), c64(MAX_THREADS))
        inline = fn.append_basic_block("inline")
        pooled = fn.append_basic_block("pooled")
        b.cbranch(b.icmp_signed("<=", t, c64(1)), inline, pooled)
        b.position_at_end(inline)
        b.call(task_fn, [ctx, c64(0), n_tasks])
        b.ret_void()

        b.position_at_end(pooled)
        self.emit_lock(b, fn, b.call(self.pthread_self, []), inline)
        # Create the missing workers (a failed pthread_create leaves fewer threads).
        wanted = b.trunc(b.sub(t, c64(1)), I32)
        create_check = fn.append_basic_block("create.check")
        create = fn.append_basic_block("create")
        created = fn.append_basic_block("created")
        b.branch(create_check)
        b.position_at_end(create_check)
        have = self.load(b, self.n_workers, "monotonic")
        b.cbranch(b.icmp_signed("<", have, wanted), create, created)
        b.position_at_end(create)
        index = b.add(have, c32(1))
        arg = b.inttoptr(b.zext(index, I64), VOIDPTR)
        rc = b.call(self.pthread_create, [tid, ir.Constant(VOIDPTR, None), worker_fn, arg])
        ok = fn.append_basic_block("create.ok")
        b.cbranch(b.icmp_signed("==", rc, c32(0)), ok, created)
        b.position_at_end(ok)
        b.call(self.pthread_detach, [b.load(tid)])
        self.store(b, b.load(tid), self.word(b, self.tids, index), "monotonic")
        self.store(b, index, self.n_workers, "monotonic")
        b.branch(create_check)

        b.position_at_end(created)
        workers = b.sext(self.load(b, self.n_workers, "monotonic"), I64)
        t = smin(b, t, b.add(workers, c64(1)))
        alone = fn.append_basic_block("alone")
        fork = fn.append_basic_block("fork")
        b.cbranch(b.icmp_signed("<=", t, c64(1)), alone, fork)
        b.position_at_end(alone)
        self.emit_unlock(b, fn)
        b.call(task_fn, [ctx, c64(0), n_tasks])
        b.ret_void()

        b.position_at_end(fork)
        self.store(b, task_fn, self.task_fn, "monotonic")
        self.store(b, ctx, self.task_ctx, "monotonic")
        self.store(b, n_tasks, self.n_tasks, "monotonic")
        self.store(b, t, self.n_threads, "monotonic")
        self.store(b, ceil_div(b, n_tasks, b.mul(t, c64(CHUNKS_PER_THREAD))), self.grain,
                   "monotonic")
        with counted_loop(b, c64(0), t, name="reset") as r:
            self.store(b, c64(0), self.claimed_count(b, r), "monotonic")
        pending = self.word(b, self.pending)
        self.store(b, b.trunc(b.sub(t, c64(1)), I32), pending, "seq_cst")
        # Offer the fork-join to workers 1..t-1 (the word's release publishes the stores
        # above).
        t32 = b.trunc(t, I32)
        with counted_loop(b, c32(1), t32, name="signal") as w:
            word = self.slot(b, w)
            old = b.atomic_rmw("xchg", word, c32(_WORK), "seq_cst")
            with b.if_then(b.icmp_unsigned("==", old, c32(_ASLEEP))):
                self.futex(b, word, _FUTEX_WAKE_PRIVATE, 1)
        self.run_chunks(b, c64(0))
        # Every chunk is claimed: take back the offers no worker has claimed yet (a
        # descheduled worker delays nothing).
        with counted_loop(b, c32(1), t32, name="steal") as w:
            pair = b.cmpxchg(self.slot(b, w), c32(_WORK), c32(_IDLE), "acq_rel", "monotonic")
            with b.if_then(b.extract_value(pair, 1)):
                self.report_done(b, fn)
        # Wait for the workers: spin, then sleep on the pending count.
        asleep = self.word(b, self.caller_asleep)
        self.wait(b, fn, pending, lambda bb, v: bb.icmp_unsigned("==", v, c32(0)),
                  CALLER_SPIN_ITERATIONS, lambda bb, ok: self.store(bb, c32(1), asleep, "seq_cst"),
                  after_sleep=lambda bb: self.store(bb, c32(0), asleep, "seq_cst"))
        self.emit_unlock(b, fn)
        b.ret_void()
        return fn


def emit_thread_pool(module, *, triple=None, after_fork=False):
    """Define the pool (its globals, worker and ``tegrad_parallel_for``) in ``module``.

    ``triple`` is the target's (the host's by default): it chooses the futex system call
    number and the spin-wait hint. ``after_fork`` also defines :data:`AFTER_FORK`.
    Returns the entry point; a module that already defines it is left as it is.
    """
    existing = module.globals.get(PARALLEL_FOR)
    if existing is not None and not existing.is_declaration:
        return existing
    em = _Emitter(module, triple or jit.host_triple())
    entry = em.emit_parallel_for(em.emit_worker())
    if after_fork:
        em.emit_after_fork()
    return entry


def _pool_module(module):
    return emit_thread_pool(module, after_fork=True)


def parallel_for_address():
    """The address of the process's one pool, compiled on first use (once, whichever
    threads ask) and registered so that JIT modules which :func:`declare_parallel_for`
    call it."""
    return jit.shared_function(PARALLEL_FOR, _pool_module)


def request_parallel_for():
    """Start compiling the process's pool (if not done) on the JIT's background thread
    (:func:`~tegrad.codegen.target.jit.request_shared`): a module calling it links once
    it is ready."""
    jit.request_shared(PARALLEL_FOR, _pool_module)


jit.provide(PARALLEL_FOR, parallel_for_address)


_AFTER_FORK_CTYPE = ctypes.CFUNCTYPE(None)


def _reset_in_child():
    """Reset the process's pool, if it was compiled, in a child just forked."""
    address = jit.shared_address(AFTER_FORK)
    if address is not None:
        _AFTER_FORK_CTYPE(address)()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)


PARALLEL_FOR_CTYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                      ctypes.c_int32)


def parallel_for(fn_address, ctx, n_tasks, n_threads):
    """Call the process's pool from Python: ``fn_address`` is a JIT task function's address."""
    return PARALLEL_FOR_CTYPE(parallel_for_address())(fn_address, ctx, n_tasks, n_threads)
