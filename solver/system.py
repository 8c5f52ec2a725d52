"""Helpers shared by the bounds and simplification code.

* :class:`NameSupply` hands out fresh variable names.
* :func:`lower_division_atoms` replaces every ``e // c`` / ``e % c`` atom that
  mentions a variable by new variables ``q``, ``r`` with ``e == c*q + r`` and
  ``0 <= r < c`` — after that, constraints are linear in the variables (atoms
  over parameters only stay: they are just opaque parameters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from .affine import Affine, FloorDiv, Mod
from .constraint import Constraint, EQ, GE

__all__ = ["NameSupply", "LoweredAtom", "lower_division_atoms", "variable_atoms"]


class NameSupply:
    """Fresh names that avoid every name seen so far.

    >>> names = NameSupply(["q", "x"])
    >>> names.fresh("q"), names.fresh("q"), names.fresh("r")
    ('q1', 'q2', 'r')
    """

    def __init__(self, taken: Iterable[str] = ()):
        self.taken = set(taken)

    def reserve(self, names: Iterable[str]) -> None:
        self.taken.update(names)

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}{k}"
        self.taken.add(name)
        return name


@dataclass(frozen=True)
class LoweredAtom:
    """``inner == divisor*quotient + remainder`` with ``0 <= remainder < divisor``."""

    inner: Affine
    divisor: int
    quotient: str
    remainder: str


def variable_atoms(expr: Affine, variables: frozenset) -> list:
    """Division atoms of ``expr`` that mention a variable, innermost first."""
    out = []
    for atom, _ in expr.terms:
        if type(atom) is str:
            continue
        inner = variable_atoms(atom.expr, variables)
        out.extend(inner)
        if not inner and atom.expr.variables() & variables:
            out.append(atom)
    return out


def _unround(c: Constraint, variables: frozenset) -> Constraint:
    """``L >= e // a`` is ``a*L + a - 1 >= e`` and ``e // a >= L`` is ``e >= a*L``.

    Bounds computed by Fourier–Motzkin look like this; reading them back as
    linear constraints spares a quotient/remainder pair per bound.
    """
    if c.kind != GE:
        return c
    atoms = [(a, k) for a, k in c.expr.terms if type(a) is not str]
    if len(atoms) != 1 or abs(atoms[0][1]) != 1 or not isinstance(atoms[0][0], FloorDiv):
        return c
    (atom, k), = atoms
    if not atom.expr.variables() & variables:
        return c
    rest = c.expr - Affine({atom: k})  # the constraint is  rest + k*(e // a) >= 0
    e, a = atom.expr, atom.divisor
    if k > 0:  # e // a >= -rest  <=>  e >= -a*rest
        return Constraint(e + rest * a, GE)
    return Constraint(rest * a + (a - 1) - e, GE)  # rest >= e // a


def lower_division_atoms(constraints: Sequence[Constraint], variables: Sequence[str],
                         names: NameSupply) -> tuple:
    """Replace division atoms over ``variables`` by quotient/remainder variables.

    Returns ``(constraints, lowered)`` where ``lowered`` lists the
    :class:`LoweredAtom` records in creation order (the new variables are not
    in ``variables``); the returned constraints include the defining equality
    and remainder range of each.

    >>> from tegrad.solver.constraint import eq
    >>> from tegrad.solver.affine import parse_affine
    >>> c = eq(parse_affine("(i + 1) % 4"), 0)
    >>> cs, low = lower_division_atoms([c], ["i"], NameSupply(["i"]))
    >>> [str(c) for c in cs]
    ['r == 0', 'i + 1 == 4*q + r', 'r >= 0', 'r <= 3']
    """
    known = frozenset(variables)
    current = [_unround(c, known) for c in constraints]
    lowered: list = []
    extra: list = []
    while True:
        pending = {}
        for c in current:
            for atom in variable_atoms(c.expr, known):
                pending.setdefault((atom.expr, atom.divisor), atom)
        if not pending:
            break
        table = {}
        for (inner, divisor) in pending:
            q, r = names.fresh("q"), names.fresh("r")
            rec = LoweredAtom(inner, divisor, q, r)
            lowered.append(rec)
            table[FloorDiv(inner, divisor)] = Affine.var(q)
            table[Mod(inner, divisor)] = Affine.var(r)
            known = known | {q, r}
            qv, rv = Affine.var(q), Affine.var(r)
            extra.append(Constraint(inner - qv * divisor - rv, EQ))
            extra.append(Constraint(rv, GE))
            extra.append(Constraint(divisor - 1 - rv, GE))
        current = [Constraint(c.expr.replace_atoms(table), c.kind) for c in current]
        extra = [Constraint(c.expr.replace_atoms(table), c.kind) for c in extra]
    return current + extra, lowered
