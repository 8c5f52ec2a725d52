"""Constraints ``expr == 0`` and ``expr >= 0`` over :class:`~solver.affine.Affine`.

>>> from tegrad.solver.affine import Affine
>>> p, q, r = Affine.var("p"), Affine.var("q"), Affine.var("r")
>>> str(eq(p, 2*q + r))
'p == 2*q + r'
>>> str(lt(r, 3))
'r <= 2'
>>> str(eq((p - 2*q) % 3, 0))
'(p - 2*q) % 3 == 0'
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Mapping

from .affine import Affine, AffineLike, lift

__all__ = ["Constraint", "EQ", "GE", "eq", "ge", "le", "lt", "gt", "TRUE", "FALSE"]

EQ = "=="
GE = ">="


@dataclass(frozen=True)
class Constraint:
    """``expr == 0`` (kind ``"=="``) or ``expr >= 0`` (kind ``">="``)."""

    expr: Affine
    kind: str = GE

    def __post_init__(self):
        if self.kind not in (EQ, GE):
            raise ValueError(f"constraint kind must be '==' or '>=', got {self.kind!r}")
        if not isinstance(self.expr, Affine):
            object.__setattr__(self, "expr", lift(self.expr))

    @property
    def is_equality(self) -> bool:
        return self.kind == EQ

    def variables(self) -> frozenset:
        return self.expr.variables()

    def substitute(self, mapping: Mapping[str, AffineLike]) -> "Constraint":
        expr = self.expr.substitute(mapping)
        return self if expr is self.expr else Constraint(expr, self.kind)

    def evaluate(self, values: Mapping[str, int]) -> bool:
        """Whether the constraint holds at the integer point ``values``."""
        v = self.expr.evaluate(values)
        return v == 0 if self.kind == EQ else v >= 0

    @property
    def truth(self):
        """True / False for a constraint without atoms, else None."""
        if self.expr.terms:
            return None
        c = self.expr.constant
        return c == 0 if self.kind == EQ else c >= 0

    def normalized(self) -> "Constraint":
        """Integer-equivalent canonical form.

        Coefficients are divided by their gcd (the constant of an inequality is
        floored, which tightens it over the integers); equalities get a positive
        leading coefficient; constant constraints become TRUE or FALSE.

        >>> from tegrad.solver.affine import Affine
        >>> x = Affine.var("x")
        >>> str(Constraint(2*x - 3).normalized())
        'x >= 2'
        >>> Constraint(2*x - 3, EQ).normalized() == FALSE
        True
        """
        truth = self.truth
        if truth is not None:
            return TRUE if truth else FALSE
        terms = self.expr.terms
        g = 0
        for _, c in terms:
            g = gcd(g, c)
        const = self.expr.constant
        if self.kind == EQ:
            if const % g:
                return FALSE
            if terms[0][1] < 0:
                g = -g
        if g == 1:
            return self
        return Constraint(Affine._raw({a: c // g for a, c in terms}, const // g), self.kind)

    def negated(self) -> "Constraint":
        """The integer negation of an inequality: ``not (e >= 0)`` is ``-e - 1 >= 0``."""
        if self.kind != GE:
            raise ValueError("only inequalities have a single-constraint negation")
        return Constraint(-self.expr - 1, GE)

    def __str__(self) -> str:
        truth = self.truth
        if truth is not None:
            return "true" if truth else "false"
        pos = {a: c for a, c in self.expr.terms if c > 0}
        neg = {a: -c for a, c in self.expr.terms if c < 0}
        const = self.expr.constant
        if self.kind == EQ:
            if not pos:
                pos, neg, const = neg, pos, -const
            if not neg:
                return f"{Affine._raw(pos, 0)} == {-const}"
            left = Affine._raw(pos, max(const, 0))
            right = Affine._raw(neg, max(-const, 0))
            return f"{left} == {right}"
        if pos and neg:
            # a - b + k >= 0  reads best as  a + k >= b  with k moved to the
            # side where it is positive.
            left, right = Affine._raw(pos, max(const, 0)), Affine._raw(neg, max(-const, 0))
            return f"{left} >= {right}"
        if pos:
            return f"{Affine._raw(pos, 0)} >= {-const}"
        return f"{Affine._raw(neg, 0)} <= {const}"

    def __repr__(self) -> str:
        return f"Constraint({str(self)!r})"


TRUE = Constraint(Affine.const(0), GE)
FALSE = Constraint(Affine.const(-1), GE)


def eq(a: AffineLike, b: AffineLike = 0) -> Constraint:
    """``a == b``."""
    return Constraint(lift(a) - lift(b), EQ)


def ge(a: AffineLike, b: AffineLike = 0) -> Constraint:
    """``a >= b``."""
    return Constraint(lift(a) - lift(b), GE)


def le(a: AffineLike, b: AffineLike = 0) -> Constraint:
    """``a <= b``."""
    return Constraint(lift(b) - lift(a), GE)


def gt(a: AffineLike, b: AffineLike = 0) -> Constraint:
    """``a > b`` (as ``a - b - 1 >= 0`` over the integers)."""
    return Constraint(lift(a) - lift(b) - 1, GE)


def lt(a: AffineLike, b: AffineLike = 0) -> Constraint:
    """``a < b`` (as ``b - a - 1 >= 0`` over the integers)."""
    return Constraint(lift(b) - lift(a) - 1, GE)
