"""The symbolic zero and the few arithmetic helpers derivative rules build with.

Tangents are ordinary expressions, or :data:`ZERO`, the symbolic zero of JAX's rule
tables: a rule that gets ``ZERO`` for an operand skips that operand's term instead of
building ``0 * x``. The helpers fold only ``ZERO`` and multiplications by the constant 1;
every other node (in particular the index selects ``(idx == x) ? 1 : 0``) is kept as is,
so that zero elimination can later find them.

>>> from tegrad.ir.expr import Var
>>> x = Var("x", "float64")
>>> add(ZERO, x) is x, mul(x, ZERO) is ZERO
(True, True)
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Cast, Const, Expr, as_expr, binary, neg as _neg, select


class _Zero:
    """The symbolic zero tangent (a singleton: compare with ``is``)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "ZERO"


ZERO = _Zero()


def is_one(e):
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == 1


def const(value, dtype):
    """``Const(value, dtype)``."""
    return Const(value, dtype)


def add(a, b):
    """``a + b`` with ``ZERO`` folded away."""
    if a is ZERO:
        return b
    if b is ZERO:
        return a
    return binary("add", a, b)


def sub(a, b):
    """``a - b`` with ``ZERO`` folded away."""
    if b is ZERO:
        return a
    if a is ZERO:
        return _neg(b)
    return binary("sub", a, b)


def mul(a, b):
    """``a * b``: ``ZERO`` if either is ``ZERO``; a factor of constant 1 is dropped."""
    if a is ZERO or b is ZERO:
        return ZERO
    if is_one(a) and a.dtype == b.dtype:
        return b
    if is_one(b) and a.dtype == b.dtype:
        return a
    return binary("mul", a, b)


def div(a, b):
    """``a / b`` (``ZERO`` when ``a`` is)."""
    if a is ZERO:
        return ZERO
    if is_one(b) and a.dtype == b.dtype:
        return a
    return binary("div", a, b)


def neg(a):
    """``-a`` (``ZERO`` stays ``ZERO``)."""
    return ZERO if a is ZERO else _neg(a)


def sum_all(terms):
    """The sum of the non-zero terms, or ``ZERO``."""
    out = ZERO
    for t in terms:
        out = add(out, t)
    return out


def choose(cond, t, f, dtype):
    """``cond ? t : f`` where ``t`` and ``f`` may be ``ZERO``."""
    if t is ZERO and f is ZERO:
        return ZERO
    t = Const(0, dtype) if t is ZERO else t
    f = Const(0, dtype) if f is ZERO else f
    return select(cond, t, f)


def materialize(t, dtype):
    """An expression for the tangent ``t``: ``ZERO`` becomes the constant 0."""
    return Const(0, dtype) if t is ZERO else t


def cast_to(e, dtype):
    """``e`` converted to ``dtype`` (no node when it already has it)."""
    if e is ZERO:
        return ZERO
    e = as_expr(e)
    return e if e.dtype == dtype else Cast(e, dtype)


def differentiable(dtype):
    """Only floating-point expressions carry derivatives; integers and bools are constant."""
    return _dt.is_float(dtype)


__all__ = ["ZERO", "add", "sub", "mul", "div", "neg", "sum_all", "choose",
           "materialize", "cast_to", "differentiable", "const", "Expr"]
