"""Interval arithmetic on integer index expressions.

``value_range(e, ranges)`` bounds an integer expression over a box of its variables
(``ranges``: name -> inclusive ``(lo, hi)``), or returns None when it cannot (a tensor
read, a division by a variable).

>>> from tegrad.ir.expr import Var
>>> value_range(Var("i") * 2 - Var("k") // 3, {"i": (0, 4), "k": (0, 8)})
(-2, 8)
"""
from __future__ import annotations

from tegrad.ir.expr import Binary
from tegrad.analysis.integer_forms import IntegerForm


def value_range(e, ranges):
    """Inclusive ``(lo, hi)`` of integer expression ``e`` over ``ranges``, or None."""
    return RangeForm(ranges)(e)


def indices_inside(indices, shape, ranges):
    """Every index of ``indices`` provably stays in ``[0, extent)`` of its dimension of
    ``shape`` over ``ranges``.

    >>> from tegrad.ir.expr import Var
    >>> indices_inside([Var("i") + 1, Var("i") // 2], (5, 2), {"i": (0, 3)})
    True
    """
    for index, extent in zip(indices, shape):
        found = value_range(index, ranges)
        if found is None or found[0] < 0 or found[1] >= extent:
            return False
    return True


def _extremes(op):
    def fn(a, b):
        products = [op(x, y) for x in a for y in b]
        return min(products), max(products)
    return fn


#: the range of ``a op b`` from the ranges of ``a`` and ``b``
_BINARY_RANGE = {
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": _extremes(lambda x, y: x * y),
    "min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
}


class RangeForm(IntegerForm):
    """The range of each integer node (None: unknown). A code generator with node kinds
    of its own subclasses it, as :class:`.affine.AffineForm`."""

    def __init__(self, ranges):
        self.ranges = ranges

    def const(self, value):
        return value, value

    def var(self, name):
        return self.ranges.get(name)

    def neg(self, a):
        return -a[1], -a[0]

    def divide(self, op, a, c):
        if op == "floordiv":
            return a[0] // c, a[1] // c
        if a[0] // c == a[1] // c:
            return a[0] % c, a[1] % c
        return 0, c - 1

    def binary(self, op, a, b):
        rule = _BINARY_RANGE.get(op)
        return None if rule is None else rule(a, b)


def axis_range(ax, ranges):
    """Inclusive range of an axis variable given the ranges of what its bounds use."""
    lo = value_range(ax.lo, ranges)
    hi = value_range(Binary("add", ax.lo, ax.extent, ax.lo.dtype), ranges)
    if lo is None or hi is None:
        return None
    return lo[0], hi[1] - 1
