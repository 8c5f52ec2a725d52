"""Parallel loops: the body of a loop marked ``parallel`` runs as tasks of the native pool.

``for v in range(begin, end, step)`` becomes, in the kernel,

    ctx = {buffers the body uses, variables it reads, begin, status = ~0}
    tegrad_parallel_for(task, &ctx, n, threads)       // n: the trip count
    if (ctx.status != ~0) return (i32) ctx.status

with ``task(ctx, lo, hi)`` running iterations ``k`` in ``[lo, hi)`` in order, each with
``v == begin + k * step``: every iteration runs once, with the values it has in the
serial loop (the pool hands out chunks of consecutive iterations). ``threads`` is a
constant of the kernel (see :func:`resolve_threads`); with one thread, inside another
parallel loop's task, when the body allocates a local buffer too large for a thread's
stack (the kernel passes those as shared storage), or when it holds a matrix product
(which runs on the threads itself, packing into the kernel's one packing space), the
loop is emitted serially.

A failed check inside a task stops that task's range (before any out-of-bounds access)
and records ``k << 32 | code`` in ``ctx.status`` with an atomic unsigned minimum. The
other ranges run to their end or their own first failure, so the smallest record is the
failure with the smallest ``k``: the one the serial loop would have stopped at, and the
kernel reports the same error whatever the thread count.

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Buffer, For, Kernel, Load, Store
>>> from tegrad.codegen.llvm.emit import emit_kernel
>>> A, B = Buffer("A", (8,), "float32", "input"), Buffer("B", (8,), "float32", "output")
>>> i = Var("i", "int64")
>>> loop = For(i, Const(0, "int64"), Const(8, "int64"), Store(B, (i,), Load(A, (i,))), "parallel")
>>> text = str(emit_kernel(Kernel("copy", (A, B), (), loop), threads=2).module)
>>> "call void @\\"tegrad_parallel_for\\"" in text, "tegrad_parallel_for" in str(
...     emit_kernel(Kernel("copy", (A, B), (), loop), threads=1).module)
(True, False)
"""
from __future__ import annotations


from llvmlite import ir

from tegrad.ir import expr as _ex
from tegrad.codegen.kernels.fork_join import TASK_FN_TYPE, declare_parallel_for
from tegrad.codegen.kernels.irutil import VOIDPTR
from tegrad.codegen.loops.mapper import buffers_of, distinct_exprs, walk_stmts
from tegrad.codegen.loops.nodes import MatrixProduct
from tegrad.codegen.target.concurrent import usable_cores
from tegrad.codegen.llvm.types import I32, I64, PTR, Value
from tegrad.codegen.llvm.names import llvm_name

#: ``ctx.status`` while no task has failed
NO_FAILURE = (1 << 64) - 1


def resolve_threads(threads):
    """The thread count a kernel is built for: ``threads``, or every usable core for None.

    >>> resolve_threads(3), resolve_threads(None) == usable_cores()
    (3, True)
    """
    return usable_cores() if threads is None else int(threads)


def _read_names(stmt):
    """Names of the variables read anywhere in ``stmt``."""
    return {x.name for x in distinct_exprs(stmt) if type(x) is _ex.Var}


def _buffers(stmt):
    """Buffers ``stmt`` reads or writes (in a stable order) and those it allocates."""
    used, allocated = buffers_of(stmt)
    return [b for b in used if b not in allocated], allocated


def _trip_count(b, begin, end, step):
    """``max(0, ceil((end - begin) / step))`` as an i64."""
    span = b.sub(end, begin)
    if step != 1:
        span = b.sdiv(b.add(span, ir.Constant(I64, step - 1)), ir.Constant(I64, step))
    zero = ir.Constant(I64, 0)
    return b.select(b.icmp_signed(">", span, zero), span, zero)


class _TaskState:
    """What a task's failure path needs: the status pointer and the loop's position."""

    def __init__(self, status, begin):
        self.status, self.begin, self.var = status, begin, None

    def fail(self, em, code):
        """Record ``code`` at the current iteration and end the task's range."""
        bld = em.builder
        k = bld.sub(self.var, self.begin)
        key = bld.or_(bld.shl(k, ir.Constant(I64, 32)), ir.Constant(I64, code))
        bld.atomic_rmw("umin", self.status, key, "monotonic")
        bld.ret_void()


def emit_parallel_loop(em, s, begin, end, body):
    """Emit the parallel loop ``s`` (bounds ``begin``, ``end`` already emitted; ``body(i)``
    emits one iteration) through the pool, or serially when it cannot run in parallel
    (see the module docstring)."""
    buffers, allocated = _buffers(s.body)
    if (em.threads <= 1 or em.task is not None
            or any(b in allocated for b in em.extra)
            or any(type(x) is MatrixProduct for x in walk_stmts(s.body))):
        em.emit_serial_for(s, begin, end, body)
        return
    names = sorted((_read_names(s.body) & set(em.env)) - {s.var.name})
    scalars = [em.env[n] for n in names]
    # a buffer used outside its allocation: em.address raises the error that says so
    pointers = [em.pointers[b] if b in em.pointers else em.address(b, ()) for b in buffers]

    fields = [PTR] * len(buffers) + [v.ir.type for v in scalars] + [I64, I64]
    ctx_type = ir.LiteralStructType(fields)
    n_fields = len(fields)
    task, task_body = _declare_task(em, s, buffers, fields)

    # the kernel's side: fill the context, fork-join, report a recorded failure
    bld = em.builder
    ctx = ir.IRBuilder(em.entry).alloca(ctx_type, name=f"{llvm_name(s.var.name)}.ctx")

    def field(builder, base, k, etype=None):
        # llvmlite types an alloca's pointer (then no source type) but not an argument
        return builder.gep(base, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True,
                           source_etype=etype)

    for k, value in enumerate(pointers + [v.ir for v in scalars] + [begin]):
        bld.store(value, field(bld, ctx, k))
    bld.store(ir.Constant(I64, NO_FAILURE), field(bld, ctx, n_fields - 1))
    pool = declare_parallel_for(em.module)
    bld.call(pool, [bld.bitcast(task, TASK_FN_TYPE.as_pointer()), bld.bitcast(ctx, VOIDPTR),
                    _trip_count(bld, begin, end, s.step), ir.Constant(I32, em.threads)])
    status = bld.load(field(bld, ctx, n_fields - 1), typ=I64)
    failed, cont = em.new_block("parallel.failed"), em.new_block("parallel.done")
    bld.cbranch(bld.icmp_unsigned("==", status, ir.Constant(I64, NO_FAILURE)), cont, failed)
    bld.position_at_end(failed)
    bld.ret(bld.trunc(status, I32))
    bld.position_at_end(cont)

    # the trampoline: unpack the context, call the body (inlined, keeping no-alias facts)
    tb = ir.IRBuilder(task.append_basic_block("entry"))
    ctx_arg, lo, hi = task.args
    args = [tb.load(field(tb, ctx_arg, k, ctx_type), typ=fields[k]) for k in range(n_fields - 1)]
    tb.call(task_body, args + [field(tb, ctx_arg, n_fields - 1, ctx_type), lo, hi])
    tb.ret_void()

    _emit_task_body(em, s, task_body, buffers, names, scalars, body)


def _declare_task(em, s, buffers, fields):
    em.tasks += 1
    base = f"{em.symbol}.{llvm_name(s.var.name)}.task{em.tasks}"
    task = ir.Function(em.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]), name=base)
    task.linkage = "internal"
    task.attributes.add("nounwind")
    body_type = ir.FunctionType(ir.VoidType(), fields[:-1] + [PTR, I64, I64])
    task_body = ir.Function(em.module, body_type, name=f"{base}.body")
    task_body.linkage = "internal"
    task_body.attributes.add("alwaysinline")
    task_body.attributes.add("nounwind")
    for arg, buf in zip(task_body.args, buffers):
        arg.name = llvm_name(buf.name)
        arg.add_attribute("noalias")
        outer = em.pointers.get(buf)
        if outer is not None and getattr(outer, "attributes", None) is not None \
                and outer.attributes.align:
            arg.attributes.align = outer.attributes.align
    return task, task_body


def _emit_task_body(em, s, fn, buffers, names, scalars, body):
    """Emit the iterations ``[lo, hi)`` of ``s`` into ``fn`` with the emitter's state
    switched to the task (its own function, buffers, variables and failure path)."""
    args = list(fn.args)
    n_buf = len(buffers)
    begin, status, lo, hi = args[-4:]
    saved = (em.function, em.entry, em.builder, em.pointers, em.env, em.memo, em.task)
    em.function = fn
    em.entry = fn.append_basic_block("entry")
    start = fn.append_basic_block("start")
    em.builder = ir.IRBuilder(start)
    em.pointers = {b: a for b, a in zip(buffers, args[:n_buf])}
    em.env = {n: Value(a, v.dtype) for n, v, a in zip(names, scalars, args[n_buf:])}
    em.memo = type(em.memo)()  # a fresh memo: the task is its own function
    em.task = _TaskState(status, begin)
    try:
        step = ir.Constant(I64, s.step)
        bld = em.builder
        first = bld.add(begin, bld.mul(lo, step) if s.step != 1 else lo)
        last = bld.add(begin, bld.mul(hi, step) if s.step != 1 else hi)

        def iteration(i):
            em.task.var = i.ir
            body(i)

        em.emit_serial_for(s, first, last, iteration)
        if not em.builder.block.is_terminated:
            em.builder.ret_void()
        ir.IRBuilder(em.entry).branch(start)
    finally:
        em.function, em.entry, em.builder, em.pointers, em.env, em.memo, em.task = saved


__all__ = ["emit_parallel_loop", "resolve_threads", "usable_cores", "NO_FAILURE"]
