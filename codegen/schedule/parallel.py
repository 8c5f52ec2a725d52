"""Choosing parallel loops: per stage, the outermost loop worth a fork-join of the pool.

:func:`parallelize_stages` looks at each top-level statement of a kernel (a stage, or the
loop nests of a block that is one) and marks ``parallel`` the outermost serial loop whose
iterations are independent (:func:`~.common.independence_problem`: every write pins the
loop variable, so a scatter runs in parallel only when its targets are disjoint) and
whose work, one execution of the whole loop, is at least ``min_work`` (see
:data:`MIN_PARALLEL_WORK`): below that a fork-join costs more than it saves. When the
outer loop has fewer iterations than threads (or a count the threads do not divide,
and few), it is first fused with the loop inside it, if that loop holds loops itself
(fusing an innermost loop would cost its vectorisation).

A scatter with no independent loop (its target rows collide) runs once per thread,
each thread applying the updates of the rows it owns (:func:`_partition_by_target`).

A stage is left alone when it already has a parallel loop (a schedule given by the user)
or is not a loop nest (it holds a statement other than the loop IR's). Every loop keeps
its iterations, so the kernel computes the same values; each iteration of a parallel
loop writes its own elements, so the results are the same for any thread count.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((1024, 512), dtype="float32", name="A")
>>> B = tg.compute((1024, 512), lambda i, j: A[i, j] * 2.0, name="B")
>>> k = lower_program([A], [B])
>>> "parallel" in format_kernel(parallelize_stages(k, threads=2))
True
>>> parallelize_stages(k, threads=1) is k
True
"""
from __future__ import annotations

from tegrad.ir.expr import Binary, Compare, Const, Var
from tegrad.analysis.intervals import value_range

from tegrad.codegen.loops.mapper import StmtMapper, stmt_exprs, walk_expr, walk_stmts
from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Check, For, If, Kernel,
                                        Let, Store)
from tegrad.codegen.llvm.parallel import resolve_threads
from tegrad.codegen.tuning import COLLAPSE_TRIPS_PER_THREAD, MIN_PARALLEL_WORK
from tegrad.codegen.schedule.common import (ScheduleError, constant_trip_count, fresh,
                                            independence_problem, loop_var_range, names_in,
                                            sole_accumulation, stmt_uses_var)
from tegrad.codegen.schedule.ifconvert import evaluation_cannot_fail
from tegrad.codegen.schedule.loops import fuse, parallelize
from tegrad.codegen.schedule.steps import Step, find_statement, names_of, parts, statement_keys

#: the statements of the loop IR; a stage holding anything else is not a loop nest
_LOOP_IR = (For, Block, If, Store, Accumulate, Let, Allocate, Check)


def _nodes(e):
    return sum(1 for _ in walk_expr(e))


def _trip(loop, ranges):
    """The trip count of ``loop`` (an upper bound when its bounds vary; None: unknown)."""
    n = constant_trip_count(loop)
    if n is not None:
        return n
    lo, hi = value_range(loop.begin, ranges), value_range(loop.end, ranges)
    if lo is None or hi is None:
        return None
    return max(0, -(-(hi[1] - lo[0]) // loop.step))


def _statement_nodes(s):
    return sum(_nodes(e) for e in stmt_exprs(s))


def loop_work(s, ranges=None, *, count=None):
    """The work of one execution of ``s``: expression nodes evaluated, summed over its
    iterations (loops with unknown bounds count as one iteration; ``ranges``: known
    inclusive ranges of the variables bound around ``s``). With ``count``, the work of
    each statement that is neither a loop, a block nor an allocation, and of each
    condition and let value, is ``count(statement or expression)`` instead.

    >>> from tegrad.ir.expr import Var, Const
    >>> from tegrad.codegen.loops.nodes import Buffer, Load
    >>> A, B = Buffer("A", (8,), "float32", "input"), Buffer("B", (8,), "float32", "output")
    >>> i = Var("i", "int64")
    >>> loop_work(For(i, Const(0, "int64"), Const(8, "int64"), Store(B, (i,), Load(A, (i,)))))
    24
    """
    ranges = dict(ranges or {})
    t = type(s)
    if t is For:
        n = _trip(s, ranges)
        inner = dict(ranges)
        r = loop_var_range(s, ranges)
        if r is not None:
            inner[s.var.name] = r
        return (1 if n is None else n) * loop_work(s.body, inner, count=count)
    if t is Block:
        return sum(loop_work(c, ranges, count=count) for c in s.stmts)
    if t is Allocate:
        return loop_work(s.body, ranges, count=count)
    if t is If:
        branches = [loop_work(s.then, ranges, count=count)]
        if s.otherwise is not None:
            branches.append(loop_work(s.otherwise, ranges, count=count))
        return (count or _nodes)(s.cond) + max(branches)
    if t is Let:
        return (count or _nodes)(s.value) + loop_work(s.body, ranges, count=count)
    return (count or _statement_nodes)(s)


def _candidates(stmt):
    """The serial loops of ``stmt`` from the outside in, each with the ranges of the loops
    around it, along the single path through lets, allocations and one-statement
    blocks (where every loop of the nest is a loop around the next)."""
    ranges, s = {}, stmt
    while True:
        t = type(s)
        if t in (Let, Allocate):
            s = s.body
        elif t is Block and len(s.stmts) == 1:
            s = s.stmts[0]
        elif t is For and s.kind == "serial":
            yield s, dict(ranges)
            r = loop_var_range(s, ranges)
            if r is not None:
                ranges[s.var.name] = r
            s = s.body
        else:
            return


def _has_loop(s):
    return any(type(n) is For for n in walk_stmts(s))


def _collapse(kernel, loop, threads):
    """Fuse ``loop`` with the loop directly inside it while it has too few iterations
    for ``threads``; returns the kernel, the (fused) loop and the ``(outer, inner)``
    names of each fusion."""
    pairs = []
    while True:
        n = constant_trip_count(loop)
        inner = loop.body
        enough = n is not None and n >= threads and (
            n % threads == 0 or n >= COLLAPSE_TRIPS_PER_THREAD * threads)
        if (n is None or enough
                or type(inner) is not For or inner.kind != "serial" or not _has_loop(inner.body)
                or constant_trip_count(inner) is None
                or stmt_uses_var(For(inner.var, inner.begin, inner.end, Block(())), loop.var.name)):
            return kernel, loop, pairs
        fused = fuse(kernel, outer=loop.var.name, inner=inner.var.name)
        pairs.append((loop.var.name, inner.var.name))
        new = [s for s in walk_stmts(fused.body) if type(s) is For
               and s.var.name not in _loop_names(kernel)]
        kernel, loop = fused, new[0]


def _loop_names(kernel):
    return {s.var.name for s in walk_stmts(kernel.body) if type(s) is For}


def _choose(stmt, threads, min_work):
    """The loop of the stage ``stmt`` to run in parallel, or None."""
    if any(type(n) not in _LOOP_IR for n in walk_stmts(stmt)):
        return None
    if any(type(n) is For and n.kind == "parallel" for n in walk_stmts(stmt)):
        return None
    for loop, ranges in _candidates(stmt):
        if loop_work(loop, ranges) < min_work:
            return None  # the loops inside do less work still
        n = constant_trip_count(loop)
        if n is not None and n < 2:
            continue
        if independence_problem(loop.body, (loop.var.name,), accumulate_ok=False) is None:
            return loop
    return None


def _partition_by_target(stmt, threads, min_work, taken):
    """``parallel for t < threads: stmt`` where each thread applies only the updates
    whose target row (an index of the stage's one write that depends on the loops
    outside, such as a gathered row of an embedding gradient) is ``t`` modulo
    ``threads``, when no loop of the stage is independent: updates of one element meet
    in one thread, in their order. None when that does not apply."""
    if any(type(n) not in _LOOP_IR for n in walk_stmts(stmt)) or \
            loop_work(stmt) < min_work:
        return None
    w = sole_accumulation(stmt)
    if w is None:
        return None
    path, s = [], stmt
    while type(s) is For and s.kind == "serial":
        path.append(s)
        s = s.body
    names = [loop.var.name for loop in path]
    inner = {n.var.name for n in walk_stmts(s) if type(n) in (For, Let)}
    for index in w.indices:
        used = {n.name for n in walk_expr(index) if type(n) is Var}
        if used & inner or not used & set(names):
            continue
        depth = max(names.index(v) for v in used if v in names) + 1
        ranges = {}
        for loop in path[:depth]:
            r = loop_var_range(loop, ranges)
            if r is not None:
                ranges[loop.var.name] = r
        if evaluation_cannot_fail(index, ranges):
            break
    else:
        return None
    t = Var(fresh("part", taken), "int64")
    mine = Compare("eq", Binary("floormod", index, Const(threads, "int64"), "int64"), t)
    body = If(mine, path[depth - 1].body)
    for loop in reversed(path[:depth]):
        body = For(loop.var, loop.begin, loop.end, body, loop.kind, loop.step)
    return For(t, Const(0, "int64"), Const(threads, "int64"), body, "parallel")


class _ReplaceStage(StmtMapper):
    def __init__(self, old, new):
        super().__init__()
        self.old, self.new = old, new

    def map_for(self, s):
        return self.new if s is self.old else super().map_for(s)


def _replaced(kernel, old, new):
    return Kernel(kernel.name, kernel.args, kernel.temps, _ReplaceStage(old, new)(kernel.body))


def partition_stage(kernel, key, threads):
    """``kernel`` with the statement ``key`` names (among :func:`~.steps.parts`) run once
    per thread, each thread applying the updates of the rows it owns (see
    :func:`_partition_by_target`), for ``threads`` threads; a ScheduleError when that
    does not apply to it."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 2:
        raise ScheduleError(f"partition: the thread count must be an int of at least 2, "
                            f"got {threads!r}")
    stages = parts(kernel.body)
    stmt = stages[find_statement(names_of(stages), key)]
    blocked = None if type(stmt) is not For else \
        _partition_by_target(stmt, threads, 0, names_in(kernel))
    if blocked is None:
        raise ScheduleError("partition: the stage is not one accumulation whose target rows "
                            "the loops around it pick")
    return _replaced(kernel, stmt, blocked)


def parallel_steps(kernel, *, threads=None, min_work=MIN_PARALLEL_WORK):
    """``(kernel, steps)``: :func:`parallelize_stages`' kernel and the steps that make it
    from ``kernel`` (``fuse_loops``, ``parallel`` and ``partition``, see
    :mod:`.primitives`)."""
    threads = resolve_threads(threads)
    if threads <= 1:
        return kernel, ()
    stages = parts(kernel.body)
    keys, steps = statement_keys(names_of(stages)), []
    for key, stmt in zip(keys, stages):
        loop = _choose(stmt, threads, min_work)
        if loop is None:
            blocked = None if type(stmt) is not For else \
                _partition_by_target(stmt, threads, min_work, names_in(kernel))
            if blocked is not None:
                kernel = _replaced(kernel, stmt, blocked)
                steps.append(Step("partition", key, (threads,)))
            continue
        try:
            collapsed, loop, pairs = _collapse(kernel, loop, threads)
            kernel = parallelize(collapsed, loop=loop.var.name)
        except ScheduleError:
            continue  # loop names shared by two stages, or serial when emitted: stays serial
        steps += [Step("fuse_loops", key, pair) for pair in pairs]
        steps.append(Step("parallel", key, (loop.var.name,)))
    return kernel, tuple(steps)


def parallelize_stages(kernel, *, threads=None, min_work=MIN_PARALLEL_WORK):
    """``kernel`` with, per stage, the loop chosen as the module docstring says marked
    parallel (``threads``: the kernel's thread count, None for every usable core; with
    one thread the kernel is returned as it is)."""
    return parallel_steps(kernel, threads=threads, min_work=min_work)[0]


__all__ = ["parallelize_stages", "parallel_steps", "partition_stage", "loop_work",
           "MIN_PARALLEL_WORK"]
