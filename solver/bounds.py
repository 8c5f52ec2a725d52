"""Variable bounds by Fourier–Motzkin elimination over the integers.

Inequalities are Affines meaning ``expr >= 0``.  Variables are eliminated from
the innermost outwards; what remains for variable ``v_k`` are the constraints
in which ``v_k`` is the innermost variable, i.e. its bounds in terms of the
parameters and the outer variables ``v_0 .. v_{k-1}``.  Each combination is
normalised (gcd division with the constant floored, which is exact over the
integers for a single constraint), and Chernikov's rule drops combinations that
are redundant for the rational projection.  The result is a sound
over-approximation of the integer projection; exact redundancy and emptiness
checks are left to isl (see :func:`solver.variable_bounds`).

Division atoms are opaque to this module: callers must first replace atoms
that mention an eliminated variable (see :mod:`solver.system`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Iterable, Sequence

from .affine import Affine

__all__ = ["Bounds", "normalize_inequality", "prune_inequalities", "project",
           "bound_expression", "InfeasibleError", "drop_redundant_bounds", "bounds_of"]


class InfeasibleError(Exception):
    """Raised when inequalities are contradictory on their own (e.g. ``-1 >= 0``)."""


@dataclass(frozen=True)
class Bounds:
    """``max(lower) <= v < min(upper)``; an empty tuple means unbounded on that side.

    >>> from tegrad.solver.affine import Affine
    >>> p = Affine.var("p")
    >>> str(Bounds((Affine.const(0), p - 2), (Affine.const(8), p + 1)))
    'max(0, p - 2) <= v < min(8, p + 1)'
    """

    lower: tuple = ()
    upper: tuple = ()

    @property
    def is_bounded(self) -> bool:
        return bool(self.lower) and bool(self.upper)

    @property
    def extent(self):
        """``upper - lower`` when both sides are a single expression, else None."""
        if len(self.lower) == 1 and len(self.upper) == 1:
            return self.upper[0] - self.lower[0]
        return None

    def evaluate(self, values) -> tuple:
        """Concrete ``(lower, upper_exclusive)`` at ``values``; None for an open side."""
        lo = max(b.evaluate(values) for b in self.lower) if self.lower else None
        hi = min(b.evaluate(values) for b in self.upper) if self.upper else None
        return lo, hi

    def format(self, name: str) -> str:
        def side(fn, items):
            if len(items) == 1:
                return str(items[0])
            return f"{fn}({', '.join(map(str, items))})"
        lo = side("max", self.lower) + " <= " if self.lower else ""
        hi = " < " + side("min", self.upper) if self.upper else ""
        return f"{lo}{name}{hi}"

    def __str__(self) -> str:
        return self.format("v")


def normalize_inequality(expr: Affine):
    """Integer-tightened ``expr >= 0``: True (always), False (never) or an Affine."""
    terms = expr.terms
    if not terms:
        return expr.constant >= 0
    g = 0
    for _, c in terms:
        g = gcd(g, c)
        if g == 1:
            return expr
    return Affine._raw({a: c // g for a, c in terms}, expr.constant // g)


def prune_inequalities(exprs: Iterable[Affine]) -> list:
    """Normalise, drop trivial ones and keep only the tightest of parallel ones.

    Raises :class:`InfeasibleError` on a constant-false constraint or on two
    opposite constraints that leave no room (``e >= 0`` and ``-e - 1 >= 0``).
    """
    best: dict = {}
    for e in exprs:
        n = normalize_inequality(e)
        if n is True:
            continue
        if n is False:
            raise InfeasibleError(str(e))
        key = n.terms
        old = best.get(key)
        if old is None or n.constant < old.constant:
            best[key] = n
    out = list(best.values())
    for e in out:
        neg = best.get(tuple((a, -c) for a, c in e.terms))
        if neg is not None and e.constant + neg.constant < 0:
            raise InfeasibleError(f"{e} >= 0 contradicts {neg} >= 0")
    return out


def _coeff(expr: Affine, var: str) -> int:
    for a, c in expr.terms:
        if a == var:
            return c
    return 0


def bound_expression(expr: Affine, var: str):
    """Turn ``a*var + e >= 0`` into ``("lower", ceil(-e/a))`` or ``("upper", floor(e/-a) + 1)``.

    The upper bound is exclusive.  Division atoms appear when ``a`` does not
    divide ``e``.

    >>> from tegrad.solver.affine import parse_affine
    >>> kind, b = bound_expression(parse_affine("p - 2*y"), "y")
    >>> kind, str(b)
    ('upper', 'p // 2 + 1')
    """
    a = _coeff(expr, var)
    if a == 0:
        raise ValueError(f"{var} does not occur in {expr}")
    rest = expr - Affine._raw({var: a}, 0)
    if a > 0:
        # ceil(-rest / a), written as a floor division so it prints plainly
        return "lower", (-rest + (a - 1)) // a
    return "upper", rest // (-a) + 1


def project(inequalities: Sequence[Affine], order: Sequence[str]) -> tuple:
    """Split ``inequalities`` into per-variable bound constraints by FM elimination.

    Returns ``(per_var, rest)``: ``per_var[v]`` lists the constraints whose
    innermost variable (in ``order``) is ``v`` and ``rest`` those without any
    variable of ``order``.  Raises :class:`InfeasibleError` when the rational
    relaxation is visibly empty.

    >>> from tegrad.solver.affine import parse_affine
    >>> ineqs = [parse_affine(s) for s in ("i", "9 - i", "j", "i - j")]
    >>> per_var, rest = project(ineqs, ["i", "j"])
    >>> [str(e) for e in per_var["j"]], [str(e) for e in rest]
    (['j', 'i - j'], [])
    """
    # Each constraint carries the set of input constraints it combines
    # (Chernikov's rule: after k eliminations more than k + 1 of them means
    # the combination is redundant for the rational projection).
    current = [(e, frozenset([i])) for i, e in enumerate(prune_inequalities(inequalities))]
    per_var = {v: [] for v in order}
    eliminated = 0
    for var in reversed(order):
        lower, upper, keep = [], [], []
        for e, h in current:
            a = _coeff(e, var)
            if a > 0:
                lower.append((e, h, a))
            elif a < 0:
                upper.append((e, h, -a))
            else:
                keep.append((e, h))
        per_var[var] = [e for e, _, _ in lower] + [e for e, _, _ in upper]
        eliminated += 1
        combined = {}
        for e1, h1, a in lower:
            for e2, h2, b in upper:
                h = h1 | h2
                if len(h) > eliminated + 1:
                    continue
                n = normalize_inequality(e1 * b + e2 * a)
                if n is True:
                    continue
                if n is False:
                    raise InfeasibleError(f"bounds of {var} cross")
                old = combined.get(n.terms)
                if old is None or n.constant < old[0].constant:
                    combined[n.terms] = (n, h)
        for e, h in keep:
            old = combined.get(e.terms)
            if old is None or e.constant <= old[0].constant:
                combined[e.terms] = (e, h)
        current = list(combined.values())
        for e, _ in current:
            neg = combined.get(tuple((x, -c) for x, c in e.terms))
            if neg is not None and e.constant + neg[0].constant < 0:
                raise InfeasibleError(f"contradiction after eliminating {var}")
    return per_var, [e for e, _ in current]


def drop_redundant_bounds(per_var: dict, rest: Sequence[Affine], order: Sequence[str],
                          parameters: Sequence[str], context: Sequence = (), system=None) -> dict:
    """Remove bounds implied by the others, exactly (integer implication via isl).

    ``per_var`` and ``rest`` come from :func:`project`; ``context`` holds
    extra :class:`~solver.constraint.Constraint` objects over the parameters
    (e.g. divisibility conditions).  Only a side with several bounds is
    examined: a lone bound is never redundant in a non-empty system.
    ``system`` may pass a prepared :class:`~solver.isl_bridge.IslSystem` over
    ``order`` and ``parameters``.
    """
    from .constraint import Constraint, GE
    from .isl_bridge import IslSystem

    base = list(context) + [Constraint(e, GE) for e in rest]
    out = {}
    for k, v in enumerate(order):
        kept = list(per_var.get(v, ()))
        for positive in (True, False):
            side = [e for e in kept if (_coeff(e, v) > 0) == positive]
            if len(side) < 2:
                continue
            if system is None:
                universe = base + [Constraint(e, GE) for u in order for e in per_var.get(u, ())]
                system = IslSystem(order, parameters, universe)
            start = system.basic_set(base)
            for e in side:
                # Keep the last bound of a side even if "implied": in an
                # empty system everything is, and the variable must stay bounded.
                if sum(1 for x in kept if (_coeff(x, v) > 0) == positive) < 2:
                    break
                others = [Constraint(x, GE) for x in kept if x is not e]
                if system.is_implied(others, e, start):
                    kept = [x for x in kept if x is not e]
        out[v] = kept
        base.extend(Constraint(e, GE) for e in kept)
    return out


def bounds_of(exprs: Iterable[Affine], var: str) -> Bounds:
    """Collect the constraints ``exprs`` on ``var`` into a :class:`Bounds`."""
    lower, upper = [], []
    for e in exprs:
        kind, b = bound_expression(e, var)
        side = lower if kind == "lower" else upper
        if b not in side:
            side.append(b)
    # constants first, then simpler expressions: stable, readable output
    order = lambda b: (not b.is_constant, len(b.terms), str(b))  # noqa: E731
    return Bounds(tuple(sorted(lower, key=order)), tuple(sorted(upper, key=order)))
