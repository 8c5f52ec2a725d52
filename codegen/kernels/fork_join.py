"""The fork-join ABI kernels call: the thread pool's entry point, its type, its limit.

    void tegrad_parallel_for(void (*fn)(void *ctx, i64 begin, i64 end), void *ctx,
                             i64 n_tasks, i32 n_threads)

runs ``fn`` over the tasks ``[0, n_tasks)`` on at most ``n_threads`` threads (see
:mod:`tegrad.codegen.runtime.thread_pool` for how). A kernel only declares it
(:func:`declare_parallel_for`); the runtime defines it: the process's one pool, which
the JIT links before a module declaring it (:func:`tegrad.codegen.target.jit.provide`),
or a pool of the exported library's own.

>>> import llvmlite.ir as ir
>>> m = ir.Module()
>>> f = declare_parallel_for(m)
>>> f.name == PARALLEL_FOR and f.is_declaration and declare_parallel_for(m) is f
True
"""
from __future__ import annotations

import llvmlite.ir as ir

from tegrad.codegen.kernels.irutil import I32, I64, VOIDPTR, declare, smin

#: the name of the pool's entry point in every module
PARALLEL_FOR = "tegrad_parallel_for"
#: the caller plus at most this many workers minus one
MAX_THREADS = 64

#: ``void fn(void *ctx, i64 begin, i64 end)``: a chunk of tasks
TASK_FN_TYPE = ir.FunctionType(ir.VoidType(), [VOIDPTR, I64, I64])
#: the entry point's type
PARALLEL_FOR_TYPE = ir.FunctionType(ir.VoidType(), [TASK_FN_TYPE.as_pointer(), VOIDPTR, I64, I32])


def useful_threads(work, least_work):
    """``max(1, work // least_work)``, the threads ``work`` pays for at ``least_work``
    each, at most ``2**31 - 1`` (no ``i32`` thread count is larger)."""
    return min(max(1, work // max(1, least_work)), 2 ** 31 - 1)


def threads_worth(b, threads, work, least_work):
    """``min(threads, useful_threads(work, least_work))`` (an ``i32``): no more threads
    than the ``work`` (a Python int, known when compiling) pays for."""
    useful = useful_threads(work, least_work)
    return threads if useful == 2 ** 31 - 1 else smin(b, threads, ir.Constant(I32, useful))


def declare_parallel_for(module):
    """The pool's entry point in ``module``: its definition or a declaration of it."""
    return declare(module, PARALLEL_FOR, PARALLEL_FOR_TYPE)


__all__ = ["MAX_THREADS", "PARALLEL_FOR", "PARALLEL_FOR_TYPE", "TASK_FN_TYPE",
           "declare_parallel_for", "threads_worth", "useful_threads"]
