"""Innermost loops writing along the stride-1 axis of memory marked ``vectorized``.

A constant loop of two or more iterations, with no loop inside it that is not unrolled,
which is no reduction and whose writes (one of them to a buffer outside the loop) all
move along their last index by exactly one per iteration, runs its iterations as
vector lanes: the mark asks the backend to vectorise it, the same iterations.

The backend forces a marked loop through LLVM's loop vectoriser (its cost model does not
decline it; see :func:`~tegrad.codegen.kernels.irutil.forced_vectorisation`). Forcing
would let LLVM reassociate a reduction the loop carries: none is marked, as every write
of a marked loop moves with it (each iteration its own elements, no value carried from
one to the next). Loops LLVM would not or should not vectorise are left unmarked
(:func:`vector_problem`): fewer than :data:`MIN_VECTOR_TRIP` iterations, a body of more
than :data:`VECTOR_BODY_NODES` expression nodes, a call of a function without a vector
form (:data:`SCALAR_CALLS`), a check or an access that may stop the kernel, a guard that
varies along the loop. What LLVM still declines is reported, not shown as vectorised
(:mod:`tegrad.codegen.llvm.vector_marks`).

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_stmt
>>> A = tg.placeholder((4, 16), name="A")
>>> B = tg.compute((4, 16), lambda i, j: A[i, j] * 2.0, name="B")
>>> marked = []
>>> print(format_stmt(mark_vector_loops(lower_program([A], [B]).body, changed=marked)))
for (i = 0; i < 4; i++) {
  vectorized for (j = 0; j < 16; j++) {
    B[i, j] = A[i, j] * 2.0;
  }
}
>>> marked
['j']
"""
from __future__ import annotations

from tegrad.ir.expr import Call, Select, may_divide_by_zero
from tegrad.codegen.loops.mapper import distinct_exprs, walk_expr, walk_stmts
from tegrad.codegen.loops.nodes import Check, For, If, Load
from tegrad.codegen.tuning import MIN_VECTOR_TRIP, VECTOR_BODY_NODES
from tegrad.codegen.schedule.common import (NotingMapper, constant_trip_count, run_noting,
                                            uses_var, writes)
from tegrad.codegen.schedule.loop_order import is_reduction_loop, stride_one

#: intrinsics the backend computes by a call of the C library per element (by dtype;
#: None: every dtype), which LLVM's loop vectoriser has no vector form for (see
#: tegrad.codegen.llvm.intrinsics; tests/codegen/llvm/test_vector_marks.py checks
#: that a loop calling any other intrinsic is vectorised)
SCALAR_CALLS = {"asinh": None, "acosh": None, "atanh": None, "log1p": None, "expm1": None,
                "erf": frozenset({"float64", "float16"})}


def _scalar_call(e):
    dtypes = SCALAR_CALLS.get(e.name, ())
    return dtypes is None or e.dtype in dtypes


def carried_reduction(loop):
    """The name of a buffer an iteration of ``loop`` writes at an element another
    iteration writes too (a reduction the loop carries: vectorising it would reassociate
    it), or None."""
    name = loop.var.name
    shared = [w.buffer.name for w in writes(loop.body)
              if not any(uses_var(i, name) for i in w.indices)]
    return shared[0] if shared else None


def vector_problem(loop, *, automatic=True):
    """Why ``loop`` is not to be marked ``vectorized`` (None when it may be): a loop inside
    it that is not unrolled, a reduction it carries, a call without a vector form, a check or an access that may stop the
    kernel (LLVM vectorises no loop that may exit early and store), too few iterations;
    for the automatic schedule (``automatic``) also a body too large for the vectoriser
    or a guard varying along the loop (an ``if``, or a select reading memory in a branch:
    LLVM often cannot if-convert them: 10 of 32 such loops of the operator table's
    programs were not vectorised)."""
    inner = [m.var.name for m in walk_stmts(loop.body) if type(m) is For and m.kind != "unrolled"]
    if inner:
        return f"loop {inner[0]!r} inside it is not unrolled (LLVM vectorises innermost loops)"
    carried = carried_reduction(loop)
    if carried is not None:
        return (f"it carries a reduction into {carried!r} (vectorising it would reassociate "
                f"the reduction: see the accumulators step)")
    exprs = list(distinct_exprs(loop.body))
    calls = sorted({e.name for e in exprs if type(e) is Call and _scalar_call(e)})
    if calls:
        return f"it calls {', '.join(calls)}, which has no vector form (a C library call)"
    if any(type(m) is Check for m in walk_stmts(loop.body)) or any(
            may_divide_by_zero(e) or (type(e) is Load and any(
                type(n) is Load for i in e.indices for n in walk_expr(i))) for e in exprs):
        return ("it may stop the kernel (a check, a divisor that may be zero, or an index "
                "read from memory)")
    n = constant_trip_count(loop)
    if n is not None and n < MIN_VECTOR_TRIP:
        return f"it runs fewer than {MIN_VECTOR_TRIP} iterations"
    if not automatic:
        return None
    if len(exprs) > VECTOR_BODY_NODES:
        return f"its body has more than {VECTOR_BODY_NODES} expression nodes"
    name = loop.var.name
    if any(type(m) is If and uses_var(m.cond, name) for m in walk_stmts(loop.body)) or any(
            type(e) is Select and uses_var(e.cond, name) and _loads(e) for e in exprs):
        return "a guard inside it varies along it"
    return None


def _loads(select):
    """A branch of ``select`` reads memory (emitted as branches, which LLVM must turn into
    masked or speculated loads)."""
    return any(type(n) is Load for arm in (select.true_value, select.false_value)
               for n in walk_expr(arm))


class _MarkVector(NotingMapper):
    def map_for(self, s):
        s = super().map_for(s)
        if not self.allowed(s.var.name):
            return s
        if s.kind != "serial" or constant_trip_count(s) is None or is_reduction_loop(s):
            return s
        ws = writes(s.body)
        # every write moving by one along the loop: no reduction is carried (module doc)
        if any(w.buffer.scope != "local" for w in ws) and all(
                stride_one(w.indices, s.var.name) for w in ws) and vector_problem(s) is None:
            self.changed.append(s.var.name)
            return For(s.var, s.begin, s.end, s.body, "vectorized", s.step)
        return s


def mark_vector_loops(s, *, changed=None, only=None):
    """``s`` with its innermost loops along the written stride-1 axis (those named in
    ``only`` when given) marked ``vectorized`` (module doc); their names appended to
    ``changed`` when given."""
    return run_noting(_MarkVector(only), s, changed)


__all__ = ["SCALAR_CALLS", "carried_reduction", "mark_vector_loops", "vector_problem"]
