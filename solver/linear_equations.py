"""Integer solutions of ``A x = b`` where ``b`` is affine in outer parameters.

With the Smith normal form ``U A V = S`` the system becomes ``S y = U b`` for
``x = V y``: row ``i < rank`` needs ``s_i | (U b)_i`` and fixes
``y_i = (U b)_i // s_i``; a zero row needs ``(U b)_i == 0``; the remaining
``y_i`` are free.  Those solvability conditions mention only parameters and are
returned as constraints (``(p - 2*y) % 3 == 0``) instead of a yes/no answer.

The free columns of ``V`` are then recombined (unimodular column operations, so
the solution lattice is unchanged) so that, wherever possible, a free variable
*is* one of the original variables: ``x + y == 5`` is solved as ``x = 5 - y``
with ``y`` free rather than through an anonymous ``t``.  Only directions
without a unit entry (``2*x + 3*y == p``) get fresh variables ``t``, ``t1``...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import gcd
from typing import Mapping, Sequence

from . import isl_bridge
from .affine import Affine, lift
from .bounds import (InfeasibleError, bounds_of, drop_redundant_bounds, normalize_inequality,
                     project)
from .constraint import Constraint, EQ, GE, FALSE
from .smith import smith_decomposition
from .system import NameSupply

__all__ = ["LinearSolution", "solve_linear_equations", "solve_lattice"]


@dataclass(frozen=True)
class LinearSolution:
    """Result of :func:`solve_linear_equations`.

    * ``solvable``: ``True`` (always), ``False`` (never) or, when it depends on
      the parameters, the tuple of conditions (same as ``condition``).
    * ``condition``: constraints on the parameters only; ``(FALSE,)`` when never.
    * ``solution``: ``{variable: Affine}`` over free variables and parameters.
    * ``free_variables``: ordered names (original names where possible).
    * ``inverse``: ``{free variable: Affine}`` over the original variables.
    * ``bounds``: ``{free variable: Bounds}`` when ``ranges`` were given.
    """

    solvable: object
    condition: tuple = ()
    solution: dict = field(default_factory=dict)
    free_variables: tuple = ()
    inverse: dict = field(default_factory=dict)
    bounds: dict = field(default_factory=dict)

    @property
    def is_conditional(self) -> bool:
        return self.solvable is not True and self.solvable is not False

    def __str__(self) -> str:
        if self.solvable is False:
            if self.condition == (FALSE,):
                return "no solution"
            return f"no solution ({_join(self.condition)})"
        lines = [] if self.solution or self.condition else ["solvable"]
        if self.condition:
            lines.append("if " + _join(self.condition) + ":")
        for v, e in self.solution.items():
            lines.append(f"  {v} = {e}")
        for v in self.free_variables:
            b = self.bounds.get(v)
            lines.append(f"  free {b.format(v) if b else v}")
        return "\n".join(lines)


def _join(constraints) -> str:
    return " and ".join(str(c) for c in constraints)


def _divisibility(value: Affine, divisor: int):
    """``divisor | value`` as a condition: True, False or a Constraint."""
    if divisor == 1:
        return True
    if value.is_constant:
        return value.constant % divisor == 0
    if value.terms[0][1] < 0:
        value = -value  # same condition, reads better with a leading plus
    residue = value % divisor
    if residue.is_constant:
        return residue.constant == 0
    return Constraint(residue, EQ)


def _zero(value: Affine):
    if value.is_constant:
        return value.constant == 0
    c = Constraint(value, EQ).normalized()
    return False if c == FALSE else c


def solve_lattice(matrix, rhs, variables, parameters=(), names: NameSupply | None = None):
    """The lattice part of :func:`solve_linear_equations` (no ranges)."""
    m, n = len(matrix), len(variables)
    names = names or NameSupply(list(variables) + list(parameters))
    b = [lift(v) for v in rhs]
    conditions = []
    never = False

    def require(cond):
        nonlocal never
        if cond is False:
            never = True
        elif cond is not True and cond not in conditions:
            conditions.append(cond)

    if n == 0:
        for v in b:
            require(_zero(v))
        return _finish(never, conditions, {}, (), {})
    if m == 0:  # no equation: every variable is free
        return _finish(False, [], {v: Affine.var(v) for v in variables}, tuple(variables),
                       {v: Affine.var(v) for v in variables})
    d = smith_decomposition(matrix)
    ub = [sum((b[k] * u for k, u in enumerate(row) if u), Affine.const(0)) for row in d.U]
    y0 = []
    for i in range(d.rank):
        s = d.S[i][i]
        require(_divisibility(ub[i], s))
        y0.append(ub[i] // s)
    for i in range(d.rank, m):
        require(_zero(ub[i]))
    if never:
        return _finish(True, [], {}, (), {})

    f = n - d.rank
    K = [row[d.rank:] for row in d.V]  # n x f, the kernel lattice basis
    G = [row[:] for row in d.V_inv[d.rank:]]  # f x n, G K == I
    x0 = [sum((y0[j] * row[j] for j in range(d.rank) if row[j]), Affine.const(0)) for row in d.V]
    pivots = _unit_pivots(K, G, f)

    # Make x0 vanish on pivot rows so that there x_row == its free variable.
    for row, col in pivots:
        a = x0[row]
        if not a.is_constant or a.constant:
            for i in range(n):
                if K[i][col]:
                    x0[i] = x0[i] - a * K[i][col]

    col_names = {}
    for row, col in pivots:
        col_names[col] = variables[row]
    pivot_cols = [col for _, col in sorted(pivots)]
    other_cols = [c for c in range(f) if c not in col_names]
    for c in other_cols:
        col_names[c] = names.fresh("t")
    ordered = pivot_cols + other_cols

    solution = {}
    for i, v in enumerate(variables):
        e = x0[i]
        for c in range(f):
            if K[i][c]:
                e = e + Affine.var(col_names[c]) * K[i][c]
        solution[v] = e
    inverse = {}
    for c in ordered:
        if c in pivot_cols:
            inverse[col_names[c]] = Affine.var(col_names[c])
            continue
        e = Affine.const(0)
        for i, v in enumerate(variables):
            if G[c][i]:
                e = e + (Affine.var(v) - x0[i]) * G[c][i]
        inverse[col_names[c]] = e
    return _finish(False, conditions, solution, tuple(col_names[c] for c in ordered), inverse)


def _finish(never, conditions, solution, free, inverse):
    if never:
        return LinearSolution(False, (FALSE,))
    cond = tuple(conditions)
    return LinearSolution(cond if cond else True, cond, solution, free, inverse)


def _unit_pivots(K, G, f):
    """Column-reduce K (mirroring on G) so that free columns own unit rows.

    Greedy, top row first: a row whose entries over the not-yet-pivoted
    columns have gcd 1 is turned, by Euclid on those columns, into a single
    entry 1 — that column becomes the free variable named after the row.
    Earlier pivot columns are then cleared on this row, so in the end
    ``K[row_j][col_k] == (j == k)`` for all pivots.
    """
    n = len(K)

    def add_col(dst, src, k):  # K[:, dst] += k * K[:, src]; G[src] -= k * G[dst]
        for row in K:
            row[dst] += k * row[src]
        G[src] = [a - k * g for a, g in zip(G[src], G[dst])]

    def negate_col(c):
        for row in K:
            row[c] = -row[c]
        G[c] = [-a for a in G[c]]

    remaining = list(range(f))
    pivots = []
    for r in range(n):
        if not remaining:
            break
        g = 0
        for c in remaining:
            g = gcd(g, K[r][c])
        if g != 1:
            continue
        while True:
            nz = [c for c in remaining if K[r][c]]
            pc = min(nz, key=lambda c: abs(K[r][c]))
            if len(nz) == 1:
                break
            for c in nz:
                if c != pc:
                    add_col(c, pc, -(K[r][c] // K[r][pc]))
        if K[r][pc] < 0:
            negate_col(pc)
        for c in remaining:
            if c != pc and K[r][c]:
                add_col(c, pc, -K[r][c])
        for _, c0 in pivots:
            if K[r][c0]:
                add_col(c0, pc, -K[r][c0])
        pivots.append((r, pc))
        remaining.remove(pc)
    return pivots


def solve_linear_equations(matrix: Sequence[Sequence[int]], rhs: Sequence,
                           variables: Sequence[str], ranges: Mapping | None = None,
                           parameters: Sequence[str] = ()):
    """Solve ``matrix @ x == rhs`` over the integers.

    ``rhs`` entries are ints or Affines in ``parameters``; ``ranges`` maps a
    variable to ``(lower, upper_exclusive)`` (ints, Affines in the parameters,
    or None for an open side).  With ranges, the free variables get
    :class:`~solver.bounds.Bounds` and the conditions include what the ranges
    demand of the parameters.

    >>> s = solve_linear_equations([[1, 1], [1, -1]], [20, 10], ["x", "y"])
    >>> s.solvable, {v: str(e) for v, e in s.solution.items()}
    (True, {'x': '15', 'y': '5'})
    >>> p, y = Affine.var("p"), Affine.var("y")
    >>> s = solve_linear_equations([[3]], [p - 2*y], ["x"], parameters=["p", "y"])
    >>> [str(c) for c in s.condition], str(s.solution["x"])
    (['(p - 2*y) % 3 == 0'], '(p - 2*y) // 3')
    """
    matrix = [[int(a) for a in row] for row in matrix]
    variables = tuple(variables)
    parameters = tuple(parameters)
    if len(rhs) != len(matrix):
        raise ValueError("rhs must have one entry per equation")
    if any(len(row) != len(variables) for row in matrix):
        raise ValueError("each matrix row needs one coefficient per variable")
    if len(set(variables) | set(parameters)) != len(variables) + len(parameters):
        raise ValueError("variable and parameter names must be distinct")
    for v in rhs:
        extra = lift(v).variables() - set(parameters)
        if extra:
            raise ValueError(f"rhs mentions {sorted(extra)}, which are not parameters")
    result = solve_lattice(matrix, rhs, variables, parameters)
    if not ranges or result.solvable is False:
        return result
    return _apply_ranges(result, ranges, parameters)


def _apply_ranges(result: LinearSolution, ranges, parameters) -> LinearSolution:
    ineqs = []
    for v, (lo, hi) in ranges.items():
        x = result.solution[v]
        if lo is not None:
            ineqs.append(x - lift(lo))
        if hi is not None:
            ineqs.append(lift(hi) - 1 - x)
    free = result.free_variables
    never = LinearSolution(False, (FALSE,))
    try:
        per_var, rest = project(ineqs, free)
    except InfeasibleError:
        return never
    conditions = list(result.condition)
    for e in rest:
        n = normalize_inequality(e)
        if n is False:
            return never
        if n is not True and Constraint(n, GE) not in conditions:
            conditions.append(Constraint(n, GE))
    everything = [Constraint(e, GE) for e in ineqs] + conditions
    if isl_bridge.is_empty(free, parameters, everything):
        return never
    tight = drop_redundant_bounds(per_var, rest, free, parameters, result.condition)
    bounds = {v: bounds_of(tight[v], v) for v in free}
    cond = tuple(conditions)
    return LinearSolution(cond if cond else True, cond, result.solution, free,
                          result.inverse, bounds)
