"""The native thread pool: every task once, results equal numpy's, inline single-thread
runs, serialised concurrent callers, no deadlock over many fork-joins."""
import ctypes
import subprocess
import sys
import textwrap
import threading
import time

import llvmlite.ir as ir
import numpy as np
import pytest

from tegrad.codegen.runtime import thread_pool as threadpool
from tegrad.codegen.target import jit
from tegrad.codegen.kernels.irutil import I64, counted_loop, declare, i64

F64 = ir.DoubleType()


def _task_module():
    """Task functions over ``ctx = {double *src, double *dst, i64 *visits, i64 *tid}``:

    - ``scale``: ``dst[i] = 2 * src[i]``, ``visits[i] += 1`` (atomic), ``tid[i] = pthread_self()``;
    - ``slow_scale``: ``scale`` that sleeps 30 ms at ``i == 50000``;
    - ``chunk_sum``: ``dst[t] = sum(src[t*64 : (t+1)*64])`` for each task ``t``;
    - ``run_scale(ctx, n, threads)`` / ``run_sum(ctx, n, threads)``: one fork-join from
      native code; ``repeat(ctx, n, threads, times)``: ``times`` fork-joins of ``scale``.
    """
    m = ir.Module(name="pool_tasks")
    pf = threadpool.declare_parallel_for(m)
    self_fn = declare(m, "pthread_self", ir.FunctionType(I64, []))

    def fields(b, ctx):
        p = b.bitcast(ctx, threadpool.VOIDPTR.as_pointer())
        get = lambda i: b.load(b.gep(p, [i64(i)]))
        return (b.bitcast(get(0), F64.as_pointer()), b.bitcast(get(1), F64.as_pointer()),
                b.bitcast(get(2), I64.as_pointer()), b.bitcast(get(3), I64.as_pointer()))

    scale = ir.Function(m, threadpool.TASK_FN_TYPE, name="scale")
    b = ir.IRBuilder(scale.append_basic_block())
    src, dst, visits, tid = fields(b, scale.args[0])
    me = b.call(self_fn, [])
    with counted_loop(b, scale.args[1], scale.args[2]) as i:
        b.store(b.fmul(b.load(b.gep(src, [i])), ir.Constant(F64, 2.0)), b.gep(dst, [i]))
        b.atomic_rmw("add", b.gep(visits, [i]), i64(1), "monotonic")
        b.store(me, b.gep(tid, [i]))
    b.ret_void()

    usleep = declare(m, "usleep", ir.FunctionType(threadpool.I32, [threadpool.I32]))
    slow = ir.Function(m, threadpool.TASK_FN_TYPE, name="slow_scale")
    b = ir.IRBuilder(slow.append_basic_block())
    with counted_loop(b, slow.args[1], slow.args[2]) as i:
        with b.if_then(b.icmp_signed("==", i, i64(50000))):
            b.call(usleep, [ir.Constant(threadpool.I32, 30000)])
        b.call(scale, [slow.args[0], i, b.add(i, i64(1))])
    b.ret_void()

    chunk_sum = ir.Function(m, threadpool.TASK_FN_TYPE, name="chunk_sum")
    b = ir.IRBuilder(chunk_sum.append_basic_block())
    src, dst, _, _ = fields(b, chunk_sum.args[0])
    with counted_loop(b, chunk_sum.args[1], chunk_sum.args[2], name="t") as t:
        acc = b.alloca(F64)
        b.store(ir.Constant(F64, 0.0), acc)
        with counted_loop(b, b.mul(t, i64(64)), b.mul(b.add(t, i64(1)), i64(64))) as i:
            b.store(b.fadd(b.load(acc), b.load(b.gep(src, [i]))), acc)
        b.store(b.load(acc), b.gep(dst, [t]))
    b.ret_void()

    # nested: each outer task runs a fork-join of ``count`` over 100 elements
    count = ir.Function(m, threadpool.TASK_FN_TYPE, name="count")
    b = ir.IRBuilder(count.append_basic_block())
    _, _, visits, _ = fields(b, count.args[0])
    with counted_loop(b, count.args[1], count.args[2]) as i:
        b.atomic_rmw("add", b.gep(visits, [i]), i64(1), "monotonic")
    b.ret_void()
    nested = ir.Function(m, threadpool.TASK_FN_TYPE, name="nested")
    b = ir.IRBuilder(nested.append_basic_block())
    with counted_loop(b, nested.args[1], nested.args[2], name="t"):
        b.call(pf, [count, nested.args[0], i64(100), ir.Constant(threadpool.I32, 2)])
    b.ret_void()

    for name, task in (("run_scale", scale), ("run_slow", slow), ("run_sum", chunk_sum),
                       ("run_nested", nested)):
        fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [threadpool.VOIDPTR, I64,
                                                           threadpool.I32]), name=name)
        b = ir.IRBuilder(fn.append_basic_block())
        b.call(pf, [task, *fn.args])
        b.ret_void()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [threadpool.VOIDPTR, I64, threadpool.I32,
                                                       I64]), name="repeat")
    b = ir.IRBuilder(fn.append_basic_block())
    with counted_loop(b, i64(0), fn.args[3]):
        b.call(pf, [scale, *fn.args[:3]])
    b.ret_void()
    return m


@pytest.fixture(scope="module")
def tasks():
    threadpool.parallel_for_address()
    engine = jit.compile_module(_task_module())
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32)
    out = {name: run(engine.get_function_address(name))
           for name in ("run_scale", "run_slow", "run_sum", "run_nested")}
    out["repeat"] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32,
                                     ctypes.c_int64)(engine.get_function_address("repeat"))
    out["scale_address"] = engine.get_function_address("scale")
    return out


class Buffers:
    def __init__(self, n, seed=0):
        rng = np.random.default_rng(seed)
        self.src = rng.standard_normal(n)
        self.dst = np.zeros(n)
        self.visits = np.zeros(n, np.int64)
        self.tid = np.zeros(n, np.int64)
        self.ctx = (ctypes.c_void_p * 4)(*(x.ctypes.data for x in
                                            (self.src, self.dst, self.visits, self.tid)))


@pytest.mark.parametrize("n_threads", [1, 2, 3, 7, 64, 1000])
@pytest.mark.parametrize("n", [0, 1, 2, 5, 1001])
def test_parallel_scale_runs_every_task_once(tasks, n, n_threads):
    buf = Buffers(max(n, 1))
    tasks["run_scale"](buf.ctx, n, n_threads)
    np.testing.assert_array_equal(buf.dst[:n], 2 * buf.src[:n])
    np.testing.assert_array_equal(buf.visits[:n], 1)
    assert not buf.visits[n:].any()


@pytest.mark.parametrize("n_threads", [1, 2, 4])
def test_parallel_sum_matches_numpy(tasks, n_threads):
    chunks = 257
    src = np.random.default_rng(1).standard_normal(chunks * 64)
    partial = np.zeros(chunks)
    ctx = (ctypes.c_void_p * 4)(src.ctypes.data, partial.ctypes.data, None, None)
    tasks["run_sum"](ctx, chunks, n_threads)
    np.testing.assert_allclose(partial, src.reshape(chunks, 64).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(partial.sum(), src.sum(), rtol=1e-10)


def test_one_thread_runs_inline_on_the_caller(tasks):
    buf = Buffers(100)
    tasks["run_scale"](buf.ctx, 100, 1)
    assert set(buf.tid.tolist()) == {threading.get_ident()}


def _chunks(n, n_threads):
    """The pool's chunks ``(begin, end)``: each range cut every ``grain`` tasks."""
    grain = -(-n // (n_threads * threadpool.CHUNKS_PER_THREAD))
    for r in range(n_threads):
        begin, end = n * r // n_threads, n * (r + 1) // n_threads
        yield from ((lo, min(lo + grain, end)) for lo in range(begin, end, grain))


def test_each_thread_starts_on_its_own_range_in_chunks(tasks):
    buf = Buffers(100000)
    me = threading.get_ident()
    seen_worker = False
    deadline = time.monotonic() + 60
    # A worker the OS has not scheduled yet leaves its range to the caller, so on a busy
    # machine it may take a while until one runs a range.
    while not seen_worker and time.monotonic() < deadline:
        tasks["run_scale"](buf.ctx, 100000, 2)
        # every chunk is one thread's
        assert all(len(set(buf.tid[lo:hi].tolist())) == 1 for lo, hi in _chunks(100000, 2))
        seen_worker = buf.tid[0] == me and buf.tid[50000] != me
    assert seen_worker


def test_a_slow_thread_leaves_its_range_to_the_others(tasks):
    # The thread that runs task 50000 (the first of the worker's range) sleeps 30 ms
    # there; the other thread, done with its own range meanwhile, runs the rest.
    buf = Buffers(100000)
    deadline = time.monotonic() + 60
    shared = False
    while not shared and time.monotonic() < deadline:
        tasks["run_slow"](buf.ctx, 100000, 2)
        np.testing.assert_array_equal(buf.dst, 2 * buf.src)
        slow = buf.tid[50000]
        rest = set(buf.tid[50000:].tolist()) - {slow}
        shared = len(set(buf.tid[:50000].tolist()) | {slow}) == 2 and bool(rest)
    assert shared
    np.testing.assert_array_equal(buf.visits, buf.visits[0])


def test_many_fork_joins_in_a_row(tasks):
    buf = Buffers(37)
    tasks["repeat"](buf.ctx, 37, 2, 20000)
    np.testing.assert_array_equal(buf.visits, 20000)
    tasks["repeat"](buf.ctx, 37, 3, 2000)
    np.testing.assert_array_equal(buf.visits, 22000)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_nested_fork_joins_run_inline(tasks, n_threads):
    # A range that forks again (on the caller's thread or a worker's) must not wait for
    # the mutex its own fork-join holds.
    buf = Buffers(100)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (tasks["run_nested"](buf.ctx, 6, n_threads),
                                              done.set()), daemon=True)
    worker.start()
    assert done.wait(timeout=60), "a nested fork-join hung"
    np.testing.assert_array_equal(buf.visits, 6)


def test_python_entry_point(tasks):
    buf = Buffers(50)
    threadpool.parallel_for(tasks["scale_address"], ctypes.addressof(buf.ctx), 50, 2)
    np.testing.assert_array_equal(buf.dst, 2 * buf.src)


def test_concurrent_callers_are_serialised(tasks):
    bufs = [Buffers(300, seed=s) for s in range(4)]
    errors = []

    def work(buf):
        try:
            for _ in range(200):
                tasks["run_scale"](buf.ctx, 300, 2)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(buf,)) for buf in bufs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a fork-join hung"
    assert not errors
    for buf in bufs:
        np.testing.assert_array_equal(buf.dst, 2 * buf.src)
        np.testing.assert_array_equal(buf.visits, 200)


def test_no_deadlock_with_sleeping_workers_in_a_fresh_process():
    # Fork-joins separated by pauses long enough for the workers to sleep in futex,
    # then bursts with no pause; a hang fails the bounded subprocess.
    code = textwrap.dedent("""
        import ctypes, time, numpy as np
        import llvmlite.ir as ir
        from tegrad.codegen.runtime import thread_pool as threadpool
        from tegrad.codegen.target import jit
        from tegrad.codegen.kernels.irutil import I64, counted_loop, i64
        threadpool.parallel_for_address()
        m = ir.Module()
        task = ir.Function(m, threadpool.TASK_FN_TYPE, name="count")
        b = ir.IRBuilder(task.append_basic_block())
        p = b.bitcast(task.args[0], I64.as_pointer())
        with counted_loop(b, task.args[1], task.args[2]) as i:
            b.atomic_rmw("add", b.gep(p, [i]), i64(1), "monotonic")
        b.ret_void()
        run = ir.Function(m, ir.FunctionType(ir.VoidType(), [threadpool.VOIDPTR, I64,
                                                             threadpool.I32]), name="run")
        b = ir.IRBuilder(run.append_basic_block())
        b.call(threadpool.declare_parallel_for(m), [task, *run.args])
        b.ret_void()
        e = jit.compile_module(m)
        f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32)(
            e.get_function_address("run"))
        counts = np.zeros(8, np.int64)
        for rep in range(30):
            f(counts.ctypes.data, 8, 1 + rep % 4)
            time.sleep(0.01 if rep % 3 else 0)
        for rep in range(3000):
            f(counts.ctypes.data, 8, 2 + rep % 3)
        assert (counts == 3030).all(), counts
        print("done")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"


def test_a_forked_child_completes_fork_joins_without_workers():
    # The child of fork() has the pool's state but none of its threads: the caller runs
    # every range no worker claims, so its fork-joins still complete.
    code = textwrap.dedent("""
        import ctypes, os, warnings
        import numpy as np
        import llvmlite.ir as ir
        from tegrad.codegen.kernels.gemm import GemmSpec, compile_gemm
        f = compile_gemm(GemmSpec.dense("float64", 40, 30, 20), min_flops_per_thread=1)
        a, b = np.random.rand(40, 20), np.random.rand(20, 30)
        assert np.allclose(f(a, b, threads=2), a @ b)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
        if pid == 0:
            ok = all(np.allclose(f(a, b, threads=t), a @ b) for t in (2, 3, 2))
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "child 0"


def test_the_pool_is_compiled_once_whichever_threads_ask_first():
    code = textwrap.dedent("""
        import threading
        from tegrad.codegen.runtime import thread_pool as threadpool
        out = []
        threads = [threading.Thread(target=lambda: out.append(threadpool.parallel_for_address()))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(len(set(out)), len(out))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "4"]


def test_futex_numbers_follow_the_target():
    assert threadpool.futex_syscall_number("x86_64-unknown-linux-gnu") == 202
    assert threadpool.futex_syscall_number("aarch64-unknown-linux-gnu") == 98
    with pytest.raises(threadpool.TegradError, match="Linux"):
        threadpool.futex_syscall_number("x86_64-apple-darwin")


@pytest.mark.parametrize("triple, syscall, hint", [
    ("x86_64-unknown-linux-gnu", "i64 202", "llvm.x86.sse2.pause"),
    ("aarch64-unknown-linux-gnu", "i64 98", "llvm.aarch64.hint"),
])
def test_emitted_pool_uses_the_targets_syscall_and_hint(triple, syscall, hint):
    m = ir.Module()
    fn = threadpool.emit_thread_pool(m, triple=triple)
    assert not fn.is_declaration
    text = str(m)
    assert f'@"syscall"({syscall}' in text and hint in text
    # emitting twice keeps the one definition
    assert threadpool.emit_thread_pool(m, triple=triple) is fn


def test_the_jit_links_the_pool_a_module_declares_before_linking_it():
    # A fresh process: no pool compiled yet when a module that only declares it is
    # compiled; the JIT compiles and registers the pool first (LLVM would stop the
    # process on the missing symbol).
    code = textwrap.dedent("""
        import ctypes
        import numpy as np
        import llvmlite.ir as ir
        from tegrad.codegen.kernels.fork_join import (PARALLEL_FOR, TASK_FN_TYPE,
                                                      declare_parallel_for)
        from tegrad.codegen.kernels.irutil import I32, I64, VOIDPTR, counted_loop, i64
        from tegrad.codegen.target import jit
        assert jit.shared_address(PARALLEL_FOR) is None
        m = ir.Module()
        task = ir.Function(m, TASK_FN_TYPE, name="count")
        b = ir.IRBuilder(task.append_basic_block())
        p = b.bitcast(task.args[0], I64.as_pointer())
        with counted_loop(b, task.args[1], task.args[2]) as i:
            b.atomic_rmw("add", b.gep(p, [i]), i64(1), "monotonic")
        b.ret_void()
        run = ir.Function(m, ir.FunctionType(ir.VoidType(), [VOIDPTR, I64, I32]), name="run")
        b = ir.IRBuilder(run.append_basic_block())
        b.call(declare_parallel_for(m), [task, *run.args])
        b.ret_void()
        f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32)(
            jit.compile_module(m).get_function_address("run"))
        counts = np.zeros(50, np.int64)
        f(counts.ctypes.data, 50, 2)
        assert (counts == 1).all(), counts
        print(jit.shared_address(PARALLEL_FOR) is not None)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
