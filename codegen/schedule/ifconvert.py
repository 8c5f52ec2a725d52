"""Guarded accumulations become unguarded ones of a selected value, and the arms of a
stored select that load are computed ahead of it.

``if (c) acc op= v`` becomes ``acc op= c ? v : e`` where ``e`` leaves every value
unchanged under ``op`` (``-0.0`` for a float sum, since ``x + -0.0 == x`` also for
``x == -0.0``; the reducer's identity otherwise, for ``tg.sum``, ``tg.prod``, ``tg.max``
and ``tg.min``). Done only when evaluating ``v`` where ``c`` is false cannot fail: each
load of ``v`` is one that ``c`` makes at the same indices, or one whose affine indices
stay inside the buffer over the ranges of the enclosing loops, and ``v`` divides
integers by nonzero constants only. A value that loads is bound by a ``let`` ahead of
the accumulation (a select's arm that loads is emitted as a branch, since that is what
keeps an unproven load from running). The loop then runs without a branch (a vector
loop needs no masked memory access).

Likewise ``buf[i] = c ? a : b`` (and the selects its arms are, in turn) binds each arm
that loads with a ``let`` ahead of the store when evaluating it cannot fail (the same
test; a load of the condition guards the top-level arms), so the select is a choice of
two values, not a branch (a relu's gradient reading its output, ``r <= 0 ? 0 : g``,
whose ``g`` loads, branched on every element). The stored values are the same: only
where they are computed changes, and an arm computed where it is not chosen cannot
fail.

>>> from tegrad.ir.expr import Compare, Const, Var
>>> from tegrad.ir.reduction import sum as tg_sum
>>> from tegrad.codegen.loops.nodes import Accumulate, Buffer, If, Load
>>> from tegrad.codegen.loops.printer import format_stmt
>>> i, X = Var("i", "int64"), Buffer("X", (4,), "float32", "input")
>>> T = Buffer("T", (), "float32", "output")
>>> s = If(Compare("gt", Load(X, (i,)), Const(0.0, "float32")),
...        Accumulate(T, (), Const(1.0, "float32"), tg_sum))
>>> print(format_stmt(if_convert(s)))
T += X[i] > 0.0 ? 1.0 : -0.0;
"""
from __future__ import annotations

from tegrad.analysis.intervals import indices_inside
from tegrad.ir import dtypes, reduction
from tegrad.ir.expr import Const, Select, Var, may_divide_by_zero

from tegrad.codegen.loops.mapper import loads, to_affine, walk_expr
from tegrad.codegen.loops.nodes import Accumulate, Let, Store
from tegrad.codegen.schedule.common import RangedStmtMapper, fresh, names_in_stmt, run_noting

#: the reducers whose neutral element is known exactly
_NEUTRAL = (reduction.sum, reduction.prod, reduction.max, reduction.min)


def _neutral(reducer, dtype):
    if reducer is reduction.sum and dtypes.is_float(dtype):
        return Const(-0.0, dtype)
    return reducer.identity(dtype)


def _in_bounds(load, ranges):
    # (a load's indices are affine first: the interval forms know no loads)
    return (all(to_affine(idx) is not None for idx in load.indices)
            and indices_inside(load.indices, load.buffer.shape, ranges))


def evaluation_cannot_fail(e, ranges, guarded=frozenset()):
    """Evaluating ``e`` anywhere in the inclusive ``ranges`` of the loop variables cannot
    fail: it divides integers by nonzero constants only, and each of its loads is in
    ``guarded`` (``(buffer, indices)`` pairs known valid) or has affine indices inside
    its buffer."""
    return not any(may_divide_by_zero(n) for n in walk_expr(e)) and all(
        (ld.buffer, ld.indices) in guarded or _in_bounds(ld, ranges) for ld in loads(e))


def _safe(value, cond, ranges):
    return evaluation_cannot_fail(value, ranges, {(ld.buffer, ld.indices) for ld in loads(cond)})


class _IfConvert(RangedStmtMapper):
    def __init__(self, taken, only):
        super().__init__(only)
        self.taken = taken

    def map_if(self, s):
        s = super().map_if(s)
        a = s.then
        if (s.otherwise is not None or type(a) is not Accumulate or a.reducer not in _NEUTRAL
                or not self.allowed(a.buffer.name)
                or not _safe(a.value, s.cond, self.ranges)
                or a.value.dtype != a.buffer.dtype):
            return s
        dtype, value = a.buffer.dtype, a.value
        self.changed.append(a.buffer.name)
        if loads(value):
            # bound ahead: a select arm that loads would be emitted as a branch
            var = Var(fresh(f"{a.buffer.name}_update", self.taken), dtype)
            chosen = Select(s.cond, var, _neutral(a.reducer, dtype), dtype)
            return Let(var, value, Accumulate(a.buffer, a.indices, chosen, a.reducer))
        chosen = Select(s.cond, value, _neutral(a.reducer, dtype), dtype)
        return Accumulate(a.buffer, a.indices, chosen, a.reducer)


    def map_store(self, s):
        s = super().map_store(s)
        if type(s.value) is not Select or not self.allowed(s.buffer.name):
            return s
        guarded = {(ld.buffer, ld.indices) for ld in loads(s.value.cond)}
        lets = []
        value = self._arms_bound(s.value, guarded, s.buffer.name, lets)
        if not lets or self._loading_arm(value):
            return s
        self.changed.append(s.buffer.name)
        out = Store(s.buffer, s.indices, value)
        for var, arm in reversed(lets):
            out = Let(var, arm, out)
        return out

    def _arms_bound(self, e, guarded, name, lets):
        """``e`` with the arms of its selects (``e`` one, and those its arms are, in
        turn) that load and whose evaluation cannot fail bound by ``lets`` (appended,
        inner ones first) to new variables; ``guarded``: loads the select's condition
        makes, valid for its arms."""
        if type(e) is not Select:
            return e
        arms = []
        for arm in (e.true_value, e.false_value):
            inner = []
            bound = self._arms_bound(arm, frozenset(), name, inner)
            if loads(bound) and evaluation_cannot_fail(bound, self.ranges, guarded):
                var = Var(fresh(f"{name}_arm", self.taken), bound.dtype)
                lets.extend(inner)
                lets.append((var, bound))
                arms.append(var)
            else:
                arms.append(arm)
        return Select(e.cond, arms[0], arms[1], e.dtype)

    @staticmethod
    def _loading_arm(e):
        """Whether a select of ``e`` (``e`` one, or one of its arms) has an arm that
        loads: emitted as a branch still."""
        return type(e) is Select and any(
            loads(arm) or _IfConvert._loading_arm(arm) for arm in (e.true_value, e.false_value))


def if_convert(s, *, taken=None, changed=None, only=None):
    """``s`` with its guarded accumulations (into the buffers named in ``only`` when
    given) unguarded (module doc; ``taken``: the names in use, new ones added, by default
    those of ``s``); the names of their buffers appended to ``changed`` when given."""
    return run_noting(_IfConvert(names_in_stmt(s) if taken is None else taken, only), s,
                      changed)


__all__ = ["if_convert", "evaluation_cannot_fail"]
