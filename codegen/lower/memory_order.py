"""The order of a kernel's top-level statements that keeps fewer temporaries alive at once.

A kernel runs its top-level statements once each, in order, and its workspace holds every
temporary from the first statement that uses it to the last (see
:func:`tegrad.codegen.llvm.kernel_buffers.live_ranges`), so the order decides the peak.
Lowering emits the statements in the program's order: a backward pass computes a weight's
gradient after every activation gradient, so each activation gradient stays alive until
the end although its weight gradient could have read it, and freed it, at once.

:func:`memory_order` reorders the statements as a list scheduler does: of the statements
whose dependencies have run, it runs next the one that adds the fewest bytes to the live
temporaries (the bytes of temporaries it starts, less those of temporaries it is the last
user of), the earliest in the original order on ties. A statement depends on every earlier
one it must follow to compute the same values: that wrote a buffer it reads or writes, or
read a buffer it writes. Statements that may stop the kernel with an error keep their
order among themselves, so the error reported is the same. A statement writing an output
and reading an input of the output's shape and dtype follows every earlier reader of
that input: an update (a training step's next parameter, computed from the old one)
that could be written in place over its input, because every read of the input came
first (:mod:`.in_place`), still can. (A gradient of a weight, which does not read the
weight, is free to move.) The new order
is kept only when its peak is below the original's.

>>> from tegrad.ir.expr import Const
>>> from tegrad.codegen.loops.nodes import Block, Buffer, Kernel, Load, Store
>>> zero = Const(0, "int64")
>>> x, out = Buffer("x", (1,), "float32", "input"), Buffer("out", (1,), "float32", "output")
>>> a, b = Buffer("a", (1000,), "float32"), Buffer("b", (1000,), "float32")
>>> write = lambda dst, value: Store(dst, (zero,), value)
>>> body = Block((write(a, Load(x, (zero,))), write(b, Load(x, (zero,))),
...               write(out, Load(a, (zero,))), write(out, Load(out, (zero,)) + Load(b, (zero,)))))
>>> k = memory_order(Kernel("k", (x, out), (a, b), body))
>>> [s.buffer.name for s in k.body.stmts]
['a', 'out', 'b', 'out']
"""
from __future__ import annotations

import numpy as np

from tegrad.ir.expr import may_divide_by_zero
from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import loads, stmt_exprs, walk_expr, walk_stmts


def buffer_bytes(buffer):
    """The bytes of ``buffer``'s storage (a bool element takes a byte)."""
    dtype = "uint8" if buffer.dtype == "bool" else buffer.dtype
    return max(buffer.size, 1) * np.dtype(dtype).itemsize


def _accesses(stmt):
    """``(reads, writes, stops)``: the names of the buffers ``stmt``
    reads and writes (its local buffers left out), and whether it may stop the kernel
    with an error (a check, an index read from data, a divisor that may be zero; a rare
    branch runs the kernel again from the start, in whatever order)."""
    reads, writes, local, stops = set(), set(), set(), False
    for node in walk_stmts(stmt):
        t = type(node)
        if t is _n.Allocate:
            local.add(node.buffer.name)
        elif t in (_n.Store, _n.Accumulate):
            writes.add(node.buffer.name)
        elif t is _n.MatrixProduct:
            writes.add(node.c.name)
            reads.update(b.name for b in node.reads)
        elif t is _n.Check:
            stops = True
        for e in stmt_exprs(node):
            for ld in loads(e):
                reads.add(ld.buffer.name)
                stops = stops or any(type(n) is _n.Load for i in ld.indices
                                     for n in walk_expr(i))
            stops = stops or any(may_divide_by_zero(n) for n in walk_expr(e))
    return reads - local, writes - local, stops


def _dependencies(accesses, twins):
    """``preds[k]``: the statements statement ``k`` must follow (earlier ones that wrote
    what it reads or writes, or read what it writes; the earlier statement that may stop
    when it may stop too; the earlier readers of each input in ``twins[o]`` that it
    reads when it writes the output ``o``)."""
    last_writer, readers, last_stop = {}, {}, None
    preds, all_readers = [], {}
    for k, (reads, writes, stops) in enumerate(accesses):
        before = set()
        for o in writes:
            for i in twins.get(o, ()):
                if i in reads:
                    before.update(all_readers.get(i, ()))
        for b in reads | writes:
            if b in last_writer:
                before.add(last_writer[b])
        for b in writes:
            before.update(readers.get(b, ()))
        if stops and last_stop is not None:
            before.add(last_stop)
        before.discard(k)
        preds.append(before)
        for b in reads:
            readers.setdefault(b, set()).add(k)
            all_readers.setdefault(b, set()).add(k)
        for b in writes:
            last_writer[b], readers[b] = k, set()
        if stops:
            last_stop = k
    return preds


def peak_bytes(order, used, nbytes):
    """The most bytes of temporaries alive together when the statements run in ``order``
    (``used[k]``: the temporaries statement ``k`` uses; ``nbytes``: their sizes), each
    alive from the first statement using it to the last."""
    return max(live_bytes(order, used, nbytes), default=0)


def live_bytes(order, used, nbytes):
    """Per position of ``order``, the bytes of temporaries alive there (see
    :func:`peak_bytes`)."""
    first, last = {}, {}
    for pos, k in enumerate(order):
        for b in used[k]:
            first.setdefault(b, pos)
            last[b] = pos
    change = [0] * (len(order) + 1)
    for b, start in first.items():
        change[start] += nbytes[b]
        change[last[b] + 1] -= nbytes[b]
    live, now = [], 0
    for delta in change[:-1]:
        now += delta
        live.append(now)
    return live


def _greedy_order(preds, used, nbytes):
    """The list scheduler's order (see the module docstring)."""
    n = len(preds)
    waiting = [len(p) for p in preds]
    followers = [[] for _ in range(n)]
    for k, p in enumerate(preds):
        for j in p:
            followers[j].append(k)
    users_left = {}
    for k in range(n):
        for b in used[k]:
            users_left[b] = users_left.get(b, 0) + 1
    live, ready, order = set(), {k for k in range(n) if not waiting[k]}, []

    def cost(k):
        started = sum(nbytes[b] for b in used[k] if b not in live)
        ended = sum(nbytes[b] for b in used[k] if users_left[b] == 1)
        return started - ended, k

    while ready:
        k = min(ready, key=cost)
        ready.discard(k)
        order.append(k)
        for b in used[k]:
            users_left[b] -= 1
            if users_left[b]:
                live.add(b)
            else:
                live.discard(b)
        for j in followers[k]:
            waiting[j] -= 1
            if not waiting[j]:
                ready.add(j)
    return order


def memory_order(kernel, measure=None, held=()):
    """``kernel`` with its top-level statements in the order that keeps the fewest bytes
    of temporaries alive together (see the module docstring), or ``kernel`` itself when
    reordering would not lower its peak (:func:`peak_bytes`, or ``measure(kernel)`` when
    given: a peak that counts what the storage plan shares). The statements at the
    positions ``held`` follow the statement before them, as well as their dependencies
    (they may move later, not earlier)."""
    if type(kernel.body) is not _n.Block or len(kernel.body.stmts) < 3:
        return kernel
    stmts = kernel.body.stmts
    accesses = [_accesses(s) for s in stmts]
    nbytes = {b.name: buffer_bytes(b) for b in kernel.temps}
    used = [(r | w) & nbytes.keys() for r, w, _ in accesses]
    inputs = [b for b in kernel.args if b.scope == "input"]
    twins = {o.name: [i.name for i in inputs if (i.shape, i.dtype) == (o.shape, o.dtype)]
             for o in kernel.args if o.scope == "output"}
    preds = _dependencies(accesses, twins)
    for k in held:
        if k:
            preds[k].add(k - 1)
    order = _greedy_order(preds, used, nbytes)
    if len(order) != len(stmts) or order == list(range(len(stmts))):
        return kernel
    ordered = _n.Kernel(kernel.name, kernel.args, kernel.temps,
                        _n.Block(tuple(stmts[k] for k in order)))
    if measure is not None:
        return ordered if measure(ordered) < measure(kernel) else kernel
    if peak_bytes(order, used, nbytes) >= peak_bytes(range(len(stmts)), used, nbytes):
        return kernel
    return ordered


__all__ = ["buffer_bytes", "live_bytes", "memory_order", "peak_bytes"]
