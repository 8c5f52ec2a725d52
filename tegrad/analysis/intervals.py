"""Interval arithmetic on integer index expressions.

``value_range(e, ranges)`` bounds an integer expression over a box of its variables
(``ranges``: name -> inclusive ``(lo, hi)``), or returns None when it cannot (a tensor
read, a division by a variable).

>>> from tegrad.ir.expr import Var
>>> value_range(Var("i") * 2 - Var("k") // 3, {"i": (0, 4), "k": (0, 8)})
(-2, 8)
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Binary, Cast, Const, Neg, Var


def value_range(e, ranges):
    """Inclusive ``(lo, hi)`` of integer expression ``e`` over ``ranges``, or None."""
    t = type(e)
    if not _dt.is_int(e.dtype):
        return None
    if t is Const:
        return e.value, e.value
    if t is Var:
        return ranges.get(e.name)
    if t is Neg:
        r = value_range(e.a, ranges)
        return None if r is None else (-r[1], -r[0])
    if t is Cast:
        return value_range(e.a, ranges) if _dt.is_int(e.a.dtype) else None
    if t is not Binary:
        return None
    a = value_range(e.a, ranges)
    if a is None:
        return None
    if e.op in ("floordiv", "floormod"):
        if type(e.b) is not Const or e.b.value <= 0:
            return None
        c = e.b.value
        if e.op == "floordiv":
            return a[0] // c, a[1] // c
        if a[0] // c == a[1] // c:
            return a[0] % c, a[1] % c
        return 0, c - 1
    b = value_range(e.b, ranges)
    if b is None:
        return None
    if e.op == "add":
        return a[0] + b[0], a[1] + b[1]
    if e.op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if e.op == "mul":
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if e.op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if e.op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    return None


def axis_range(ax, ranges):
    """Inclusive range of an axis variable given the ranges of what its bounds use."""
    lo = value_range(ax.lo, ranges)
    hi = value_range(Binary("add", ax.lo, ax.extent, ax.lo.dtype), ranges)
    if lo is None or hi is None:
        return None
    return lo[0], hi[1] - 1
