"""Guarded accumulations become unguarded ones of a selected value.

``if (c) acc op= v`` becomes ``acc op= c ? v : e`` where ``e`` leaves every value
unchanged under ``op`` (``-0.0`` for a float sum, since ``x + -0.0 == x`` also for
``x == -0.0``; the reducer's identity otherwise, for ``tg.sum``, ``tg.prod``, ``tg.max``
and ``tg.min``). Done only when evaluating ``v`` where ``c`` is false cannot fail: ``v``
loads nothing that ``c`` does not load at the same indices. The loop then runs without
a branch (a vector loop needs no masked memory access).

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

from tegrad.ir import dtypes, reduction
from tegrad.ir.expr import Const, Select

from tegrad.codegen.loops.mapper import StmtMapper, loads
from tegrad.codegen.loops.nodes import Accumulate

#: the reducers whose neutral element is known exactly
_NEUTRAL = (reduction.sum, reduction.prod, reduction.max, reduction.min)


def _neutral(reducer, dtype):
    if reducer is reduction.sum and dtypes.is_float(dtype):
        return Const(-0.0, dtype)
    return reducer.identity(dtype)


def _safe(value, cond):
    guarded = {(ld.buffer, ld.indices) for ld in loads(cond)}
    return all((ld.buffer, ld.indices) in guarded for ld in loads(value))


class _IfConvert(StmtMapper):
    def map_if(self, s):
        s = super().map_if(s)
        a = s.then
        if (s.otherwise is not None or type(a) is not Accumulate or a.reducer not in _NEUTRAL
                or not _safe(a.value, s.cond) or a.value.dtype != a.buffer.dtype):
            return s
        value = Select(s.cond, a.value, _neutral(a.reducer, a.buffer.dtype), a.buffer.dtype)
        return Accumulate(a.buffer, a.indices, value, a.reducer)


def if_convert(s):
    """``s`` with its guarded accumulations unguarded (module doc)."""
    return _IfConvert()(s)


__all__ = ["if_convert"]
