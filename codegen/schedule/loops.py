"""Loop transformations: split, reorder, fuse, unroll, vectorize, parallelize.

Each takes a :class:`~codegen.loops.nodes.Kernel` and loop names (keyword-only) and
returns a new kernel computing the same values; the docstrings state the identity each
preserves.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((10,), dtype="float64", name="A")
>>> B = tg.compute((10,), lambda i: A[i] * 2.0, name="B")
>>> k = split(lower_program([A], [B]), loop="i", factor=4, tail="loop")
>>> print(format_kernel(k))
kernel kernel(float64 A[10], float64 B[10]) {
  for (i_o = 0; i_o < 2; i_o++) {
    for (i_i = 0; i_i < 4; i_i++) {
      B[i_o * 4 + i_i] = A[i_o * 4 + i_i] * 2.0;
    }
  }
  for (i = 8; i < 10; i++) {
    B[i] = A[i] * 2.0;
  }
}
"""
from __future__ import annotations

import numpy as np

from tegrad.ir.expr import Binary, Compare, Const, Var
from tegrad.analysis.simplify import simplify

from tegrad.codegen.loops.mapper import block, stmt_children, substitute_stmt, walk_stmts
from tegrad.codegen.loops.nodes import Allocate, For, If, MatrixProduct
from tegrad.codegen.tuning import STACK_LIMIT_BYTES, UNROLL_LIMIT
from tegrad.codegen.schedule.common import (ScheduleError, constant_trip_count, find_loop, fresh,
                                            independence_problem, loop_value, names_in,
                                            replace_loop, stmt_uses_var, uses_var)

INDEX = "int64"


def _c(v):
    return Const(int(v), INDEX)


def _s(e):
    return simplify(e)


def _trip(loop):
    n = constant_trip_count(loop)
    if n is not None:
        return _c(n)
    span = Binary("sub", loop.end, loop.begin, INDEX)
    if loop.step == 1:
        return _s(span)
    return _s(Binary("floordiv", Binary("add", span, _c(loop.step - 1), INDEX), _c(loop.step),
                     INDEX))


def split(kernel, *, loop, factor, tail="guard"):
    """Split ``loop`` into an outer and an inner loop of ``factor`` iterations.

    Preserves ``v == begin + (outer * factor + inner) * step`` for every iteration, each
    once: with ``tail="guard"`` the last outer iteration tests ``v < end`` when the trip
    count may not divide; with ``tail="loop"`` full blocks run unguarded and a tail loop
    runs the remaining iterations.
    """
    if not (isinstance(factor, int) and factor >= 1):
        raise ScheduleError(f"split of {loop!r}: factor must be a positive int, got {factor!r}")
    if tail not in ("guard", "loop"):
        raise ScheduleError(f"split of {loop!r}: tail must be 'guard' or 'loop', got {tail!r}")
    taken = names_in(kernel)
    outer, inner = Var(fresh(loop + "_o", taken), INDEX), Var(fresh(loop + "_i", taken), INDEX)

    def rewrite(s):
        n = constant_trip_count(s)
        trip = _trip(s)
        value = loop_value(s, Binary("add", Binary("mul", outer, _c(factor), INDEX), inner, INDEX))
        body = substitute_stmt(s.body, {s.var.name: value})
        inner_loop = lambda b: For(inner, _c(0), _c(factor), b, s.kind if s.kind != "parallel"
                                   else "serial")
        divides = n is not None and n % factor == 0
        if tail == "guard":
            n_outer = _s(Binary("floordiv", Binary("add", trip, _c(factor - 1), INDEX),
                                _c(factor), INDEX))
            guarded = body if divides else If(Compare("lt", value, s.end), body)
            return For(outer, _c(0), n_outer, inner_loop(guarded),
                       "parallel" if s.kind == "parallel" else "serial")
        n_full = _s(Binary("floordiv", trip, _c(factor), INDEX))
        main = For(outer, _c(0), n_full, inner_loop(body),
                   "parallel" if s.kind == "parallel" else "serial")
        if divides:
            return main
        start = _s(loop_value(s, Binary("mul", n_full, _c(factor), INDEX)))
        return block([main, For(s.var, start, s.end, s.body, "serial", s.step)])

    return replace_loop(kernel, loop, rewrite)


def _perfect_nest(kernel, names):
    """The loops named ``names`` as a perfect nest, outermost first."""
    loops = [find_loop(kernel, n) for n in names]
    members = set(names)
    top = next(s for s in walk_stmts(kernel.body) if type(s) is For and s.var.name in members)
    chain = [top]
    while len(chain) < len(names):
        body = chain[-1].body
        if type(body) is not For or body.var.name not in members:
            raise ScheduleError(f"loops {list(names)} are not perfectly nested (the body of "
                                f"{chain[-1].var.name!r} is not one of them)")
        chain.append(body)
    del loops
    return chain


def reorder(kernel, *, loops):
    """Run the perfectly nested ``loops`` in the order given (outermost first).

    Preserves the set of iterations (each combination of the loop variables runs once);
    refused unless the iterations are independent (each writes its own elements, or
    accumulates, which reorders a reduction's combinations only).
    """
    loops = tuple(loops)
    if len(set(loops)) != len(loops) or len(loops) < 2:
        raise ScheduleError(f"reorder: give two or more distinct loops, got {loops!r}")
    chain = _perfect_nest(kernel, loops)
    by_name = {s.var.name: s for s in chain}
    problem = independence_problem(chain[-1].body, loops, accumulate_ok=True, loops=chain)
    if problem:
        raise ScheduleError(f"reorder {list(loops)}: {problem}")
    for pos, name in enumerate(loops):
        s = by_name[name]
        for later in loops[pos + 1:]:
            if uses_var(s.begin, later) or uses_var(s.end, later):
                raise ScheduleError(f"reorder: the bounds of {name!r} use {later!r}, which "
                                    f"would run inside it")

    def rewrite(top):
        body = chain[-1].body
        for name in reversed(loops):
            s = by_name[name]
            body = For(s.var, s.begin, s.end, body, s.kind, s.step)
        return body

    return replace_loop(kernel, chain[0].var.name, rewrite)


def fuse(kernel, *, outer, inner):
    """Fuse ``outer`` and the loop ``inner`` directly inside it into one loop.

    Preserves ``outer == begin_o + (f // n_inner) * step_o`` and ``inner == begin_i +
    (f % n_inner) * step_i`` for ``f`` in ``[0, n_outer * n_inner)``, the iterations in
    the same order.
    """
    o = find_loop(kernel, outer)
    if type(o.body) is not For or o.body.var.name != inner:
        raise ScheduleError(f"fuse: {inner!r} is not the whole body of {outer!r}")
    i = o.body
    if stmt_uses_var(For(i.var, i.begin, i.end, block([])), outer):
        raise ScheduleError(f"fuse: the bounds of {inner!r} depend on {outer!r}")
    taken = names_in(kernel)
    f = Var(fresh(f"{outer}_{inner}", taken), INDEX)
    n_i = _trip(i)
    mapping = {outer: _s(loop_value(o, Binary("floordiv", f, n_i, INDEX))),
               inner: _s(loop_value(i, Binary("floormod", f, n_i, INDEX)))}
    total = _s(Binary("mul", _trip(o), n_i, INDEX))
    kind = o.kind if o.kind == i.kind else "serial"
    return replace_loop(kernel, outer,
                        lambda s: For(f, _c(0), total, substitute_stmt(i.body, mapping), kind))


def _mark(kernel, loop, kind):
    s = find_loop(kernel, loop)
    if constant_trip_count(s) is None:
        raise ScheduleError(f"{kind} loop {loop!r}: its trip count is not a constant "
                            f"({s.begin} to {s.end}); split it first")
    return replace_loop(kernel, loop, lambda s: For(s.var, s.begin, s.end, s.body, kind, s.step))


def unroll(kernel, *, loop):
    """Mark ``loop`` (constant trip count, at most :data:`UNROLL_LIMIT` iterations) for
    unrolling: the same iterations, in order."""
    n = constant_trip_count(find_loop(kernel, loop))
    if n is not None and n > UNROLL_LIMIT:
        raise ScheduleError(f"unroll loop {loop!r}: {n} iterations, more than the "
                            f"{UNROLL_LIMIT} a loop is unrolled to; split it first")
    return _mark(kernel, loop, "unrolled")


def vectorize(kernel, *, loop):
    """Mark ``loop`` (constant trip count) for vectorisation: the same iterations, with
    independent lanes where the backend can."""
    return _mark(kernel, loop, "vectorized")


def _enclosing(kernel, loop):
    """The loops around the loop named ``loop`` (outermost first)."""
    stack = [(kernel.body, ())]
    while stack:
        s, around = stack.pop()
        if type(s) is For and s.var.name == loop:
            return around
        inner = around + (s,) if type(s) is For else around
        stack.extend((c, inner) for c in stmt_children(s))
    return ()


def serial_reason(s, around):
    """Why the backend would run the loop ``s``, marked parallel, serially (None when it
    would not), ``around`` the loops around it: it holds a matrix product (which runs on
    the threads itself), it is inside or around another parallel loop (a task runs its
    loops serially), or it allocates a local buffer too large for a thread's stack."""
    inside = list(walk_stmts(s.body))
    if any(type(n) is MatrixProduct for n in inside):
        return "it holds a matrix product, which runs on the threads itself"
    nested = [n.var.name for n in inside if type(n) is For and n.kind == "parallel"] + [
        n.var.name for n in around if n.kind == "parallel"]
    if nested:
        return f"loop {nested[0]!r} around or inside it is parallel"
    large = [n.buffer.name for n in inside if type(n) is Allocate
             and n.buffer.size * np.dtype(n.buffer.dtype).itemsize > STACK_LIMIT_BYTES]
    if large:
        return (f"it allocates {large[0]!r}, larger than a thread's stack takes "
                f"({STACK_LIMIT_BYTES} bytes)")
    return None


def serial_when_emitted(kernel, loop):
    """:func:`serial_reason` for the loop named ``loop`` of ``kernel``."""
    return serial_reason(find_loop(kernel, loop), _enclosing(kernel, loop))


def parallelize(kernel, *, loop):
    """Mark ``loop`` parallel: the same iterations, in any order or at once.

    Refused unless its iterations are independent: each write pins the loop variable
    (different iterations write different elements; no accumulation into one element
    from several iterations) and written buffers are read only where written; and
    refused when the backend would run it serially anyway (:func:`serial_when_emitted`).
    """
    s = find_loop(kernel, loop)
    problem = independence_problem(s.body, (loop,), accumulate_ok=False) or \
        serial_when_emitted(kernel, loop)
    if problem:
        raise ScheduleError(f"parallelize {loop!r}: {problem}")
    return replace_loop(kernel, loop, lambda s: For(s.var, s.begin, s.end, s.body, "parallel",
                                                    s.step))
