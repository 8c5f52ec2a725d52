"""The Kronecker select ``(idx_0 == x_0 && ...) ? 1 : 0``: autodiff's promise to zero elimination.

Reverse mode differentiates a read ``X[idx]`` with respect to the element ``X[x]`` as
this select (and a Jacobian's head is one); zero elimination turns each equality into a
pinned variable and the select into the condition of a term. Both sides build and
recognise it here only, so a change of its shape on one side cannot make gradients
silently slow: :func:`kronecker` builds it, :func:`kronecker_pairs` recognises it, and
:func:`equality_sides` reads one of its equalities.

>>> from tegrad.ir.expr import Var
>>> k = kronecker([Var("i"), Var("j")], [Var("a"), Var("b")], "float64")
>>> str(k)
'(i == a && j == b) ? 1.0 : 0.0'
>>> [(str(i), str(x)) for i, x in kronecker_pairs(k)]
[('i', 'a'), ('j', 'b')]
"""
from __future__ import annotations

from tegrad.ir.expr import And, Compare, Const, Select, select


def kronecker(indices, xs, dtype):
    """``(indices[0] == xs[0] && ...) ? 1 : 0`` in ``dtype`` (the constant 1 for none)."""
    if not indices:
        return Const(1, dtype)
    cond = None
    for i, x in zip(indices, xs):
        c = i == x
        cond = c if cond is None else And(cond, c)
    return select(cond, Const(1, dtype), Const(0, dtype))


def equality_sides(c):
    """``(a, b)`` when the condition ``c`` is the equality ``a == b``, else None."""
    if type(c) is Compare and c.op == "eq":
        return c.a, c.b
    return None


def kronecker_pairs(e):
    """``[(index, x)]`` when ``e`` is a select built by :func:`kronecker`, else None."""
    if type(e) is not Select or not _is_const(e.true_value, 1) \
            or not _is_const(e.false_value, 0):
        return None
    pairs, cond = [], e.cond
    while type(cond) is And:
        sides = equality_sides(cond.b)
        if sides is None:
            return None
        pairs.append(sides)
        cond = cond.a
    sides = equality_sides(cond)
    if sides is None:
        return None
    pairs.append(sides)
    return pairs[::-1]


def _is_const(e, value):
    return type(e) is Const and e.value == value


__all__ = ["kronecker", "kronecker_pairs", "equality_sides"]
