"""``simplify_domain``: an equivalent domain with fewer, tighter variables.

Steps (each keeps a bijection between the integer points):

1. every ``e // c`` / ``e % c`` that mentions a variable becomes new variables
   ``q``, ``r`` with ``e == c*q + r, 0 <= r < c``;
2. the equalities are solved over the integers (Smith normal form, see
   :mod:`solver.linear_equations`) and the solution substituted; the
   solvability conditions are conditions on the parameters;
3. implicit equalities — opposite inequalities, variables pinned by the integer
   affine hull (isl), then variables pinned to a quotient of the parameters
   (``0 <= E - c*v < c``: ``v == E // c``) — go back to step 2;
4. Fourier–Motzkin gives each variable's bounds in terms of the parameters
   and outer variables; bounds implied by the others are dropped (isl);
5. a variable with a single lower bound ``L`` is shifted, ``v = v_s + L``, so
   that it starts at 0; other bounds stay as conditions.

Conditions that mention only parameters (divisibility, and what the ranges
demand of the parameters — a necessary condition for a non-empty domain)
end up in ``new.parameter_conditions``.
"""

from __future__ import annotations

from typing import Sequence

from .affine import Affine
from .bounds import (InfeasibleError, bound_expression, bounds_of, drop_redundant_bounds, project,
                     prune_inequalities)
from .constraint import Constraint, EQ, GE
from .domain import Domain
from .isl_bridge import IslSystem
from .linear_equations import solve_lattice
from .system import NameSupply, lower_division_atoms, variable_atoms
from .transform import DomainTransformation

__all__ = ["simplify_domain"]


class _Empty(Exception):
    pass


def simplify_domain(domain: Domain) -> DomainTransformation:
    """Simplify ``domain``; the result's ``new`` domain is equivalent to it.

    If the domain has no integer point for any parameter values, the result
    has ``is_empty`` True: ``new`` is ``Domain.empty(parameters)`` (no
    variables, condition ``false``) and ``new_to_old`` is empty.

    >>> from tegrad.solver.affine import Affine
    >>> from tegrad.solver.constraint import eq
    >>> y, r, p = Affine.var("y"), Affine.var("r"), Affine.var("p")
    >>> d = Domain([("y", 0, 8), ("r", 0, 3)], [eq(y*2 + r, p)], parameters=["p"])
    >>> t = simplify_domain(d)
    >>> print(t.new)
    [p] -> { y in [0, 8) : 2*y + 2 >= p and p >= 2*y and p >= 0 and p <= 16 }
    >>> str(t.old_to_new["r"])
    'p - 2*y'
    """
    try:
        return _Simplifier(domain).run()
    except (_Empty, InfeasibleError):
        params = domain.parameters
        return DomainTransformation(domain, Domain.empty(params),
                                    {v: Affine.const(0) for v in domain.names}, {})


class _Simplifier:
    def __init__(self, domain: Domain):
        self.domain = domain
        self.params = domain.parameters
        self.names = NameSupply(list(domain.names) + list(domain.parameters))
        self.cur = list(domain.names)
        # old variable -> expression over the current variables
        self.o2n = {v: Affine.var(v) for v in domain.names}
        # current variable -> expression over the old variables
        self.n2o = {v: Affine.var(v) for v in domain.names}
        self.eqs: list = []
        self.ineqs: list = []
        self.pconds: list = []

    # -- bookkeeping ------------------------------------------------------------
    def add_pcond(self, c: Constraint) -> None:
        c = c.normalized()
        if c.truth is False:
            raise _Empty
        if c.truth is None and c not in self.pconds:
            self.pconds.append(c)

    def classify(self, constraints: Sequence[Constraint]) -> None:
        cur = set(self.cur)
        for c in constraints:
            c = c.normalized()
            if c.truth is True:
                continue
            if c.truth is False:
                raise _Empty
            if not c.variables() & cur:
                self.add_pcond(c)
            elif c.kind == EQ:
                self.eqs.append(c.expr)
            else:
                self.ineqs.append(c.expr)

    # -- steps ------------------------------------------------------------------
    def run(self) -> DomainTransformation:
        if self.domain.is_trivially_empty:
            raise _Empty
        constraints, lowered = lower_division_atoms(self.domain.constraints(), self.cur,
                                                    self.names)
        for rec in lowered:
            self.cur += [rec.quotient, rec.remainder]
            inner = rec.inner.substitute(self.n2o)
            self.n2o[rec.quotient] = inner // rec.divisor
            self.n2o[rec.remainder] = inner % rec.divisor
        self.classify(constraints)
        while True:
            if self.eqs:
                self.solve_equalities()
            self.ineqs = prune_inequalities(self.ineqs)
            self.split_ineqs()
            if self.eqs:
                continue
            everything = self.all_constraints()
            self.system = IslSystem(self.cur, self.params, everything)
            hull = self.system.affine_hull(everything)
            if hull is None:
                raise _Empty
            cur = set(self.cur)
            self.eqs = [h for h in hull if h.variables() & cur] or self.floor_pinned()
            if not self.eqs:
                break
        return self.finish()

    def floor_pinned(self) -> list:
        """``v - E // c`` for each variable ``v`` pinned by ``0 <= E - c*v <= c - 1`` with
        ``E`` over the parameters (a quotient the division atoms introduced, such as the
        group of a grouped convolution's channel): the variable is then solved for."""
        cur = set(self.cur)
        out = []
        for v in self.cur:
            for up in self.ineqs:
                c = -up.coeff(v)
                if c <= 0:
                    continue
                e = up + Affine.var(v) * c
                if e.variables() & cur:
                    continue
                if any(lo.coeff(v) == c and (up + lo).is_constant and (up + lo).constant == c - 1
                       for lo in self.ineqs):
                    out.append(Affine.var(v) - e // c)
                    break
        return out

    def all_constraints(self) -> list:
        return [Constraint(e, GE) for e in self.ineqs] + self.pconds

    def split_ineqs(self) -> None:
        """Move parameter-only inequalities out; turn opposite pairs into equalities."""
        cur = set(self.cur)
        keep = []
        for e in self.ineqs:
            if e.variables() & cur:
                keep.append(e)
            else:
                self.add_pcond(Constraint(e, GE))
        by_terms = {e.terms: e for e in keep}
        paired = set()
        for e in keep:
            neg = by_terms.get(tuple((a, -c) for a, c in e.terms))
            if neg is not None and e.constant + neg.constant == 0 and e.terms not in paired:
                paired.add(e.terms)
                paired.add(neg.terms)
                self.eqs.append(e)
        self.ineqs = [e for e in keep if e.terms not in paired]

    def solve_equalities(self) -> None:
        eqs, self.eqs = self.eqs, []
        cols = [v for v in self.cur if any(e.coeff(v) for e in eqs)]
        colset = set(cols)
        matrix, rhs = [], []
        for e in eqs:
            matrix.append([e.coeff(v) for v in cols])
            rhs.append(-Affine([(a, c) for a, c in e.terms if a not in colset], e.constant))
        sol = solve_lattice(matrix, rhs, cols, self.params, self.names)
        if sol.solvable is False:
            raise _Empty
        for c in sol.condition:
            self.add_pcond(c)
        new_n2o = {w: sol.inverse[w].substitute(self.n2o) for w in sol.free_variables}
        for v in cols:
            del self.n2o[v]
        self.n2o.update(new_n2o)
        sub = sol.solution
        self.o2n = {k: e.substitute(sub) for k, e in self.o2n.items()}
        free = set(sol.free_variables)
        self.cur = [v for v in self.cur if v not in colset or v in free] + \
                   [w for w in sol.free_variables if w not in colset]
        self.ineqs = [e.substitute(sub) for e in self.ineqs]

    def finish(self) -> DomainTransformation:
        order = list(self.cur)
        per_var, rest = project(self.ineqs, order)
        for e in rest:
            self.add_pcond(Constraint(e, GE))
        system = self.system  # same variables as the last hull; FM adds no divisions
        self.drop_redundant_pconds(system)
        tight = drop_redundant_bounds(per_var, [], order, self.params, self.pconds, system)

        shift_sub = {}  # current name -> final name (+ shift)
        n2o_final = {}
        variables, var_conds = [], []
        final_bounds = {}
        for v in order:
            cs = [e.substitute(shift_sub) for e in tight[v]]
            lowers = [e for e in cs if e.coeff(v) > 0]
            uppers = [e for e in cs if e.coeff(v) < 0]
            lo_bounds = [bound_expression(e, v)[1] for e in lowers]
            name = v
            shift = None
            if len(lowers) == 1 and lo_bounds[0] != Affine.const(0) \
                    and not variable_atoms(lo_bounds[0], frozenset(order) | frozenset(n2o_final)):
                shift = lo_bounds[0]
                name = self.names.fresh(v + "_s")
                moved = Affine.var(name) + shift
                shift_sub[v] = moved
                cs = [e.substitute({v: moved}) for e in cs]
                lowers = [e for e in cs if e.coeff(name) > 0]
                uppers = [e for e in cs if e.coeff(name) < 0]
            lo, lo_rest = _choose(lowers, name)
            hi, hi_rest = _choose(uppers, name)
            variables.append((name, lo, hi))
            final_bounds[name] = bounds_of(lowers + uppers, name)
            var_conds += [Constraint(e, GE) for e in lo_rest + hi_rest]
            n2o = self.n2o[v]
            if shift is not None:
                n2o = n2o - shift.substitute(n2o_final)
            n2o_final[name] = n2o
        o2n = {k: e.substitute(shift_sub) for k, e in self.o2n.items()}
        new = Domain(variables, var_conds + self.pconds, self.params)
        # The bounds are already known: spare the caller a second projection.
        object.__setattr__(new, "_bounds", final_bounds)
        return DomainTransformation(self.domain, new, o2n, n2o_final)

    def drop_redundant_pconds(self, system) -> None:
        kept = list(self.pconds)
        for c in list(kept):
            others = [x for x in kept if x is not c]
            if c.kind == EQ:
                # Inequalities alone practically never imply a divisibility
                # or an equality (pinned parameters aside), so only look when
                # another equality shares a name with it.
                shared = [x for x in others if x.kind == EQ and x.variables() & c.variables()]
                implied = bool(shared) and system.is_implied(others, c.expr) \
                    and system.is_implied(others, -c.expr)
            elif _may_be_implied(c, others):
                implied = system.is_implied(others, c.expr)
            else:
                implied = False
            if implied:
                kept = others
        if kept and system.is_empty(kept):
            raise _Empty
        self.pconds = kept


def _may_be_implied(c: Constraint, others) -> bool:
    """Cheap necessary condition for ``others`` to imply the inequality ``c``.

    Say a plain name (not inside any division) has a positive coefficient
    in ``c``.  If no other constraint has it with a positive coefficient (or
    in an equality), decreasing it keeps all the others satisfied and
    eventually violates ``c``: ``c`` is not implied.
    """
    inside = set()
    for x in [c] + list(others):
        for a in x.expr.atoms():
            inside |= a.variables()
    for a, k in c.expr.terms:
        if type(a) is not str or a in inside:
            continue
        if not any(x.expr.coeff(a) and (x.kind == EQ or (x.expr.coeff(a) > 0) == (k > 0))
                   for x in others):
            return False
    return True


def _choose(constraints: list, var: str):
    """Pick the bound that becomes the range; the others stay conditions."""
    if not constraints:
        return None, []
    bounds = [bound_expression(e, var)[1] for e in constraints]

    def rank(i):
        b = bounds[i]
        return (not b.is_constant, bool(b.atoms()), len(b.terms), i)

    best = min(range(len(bounds)), key=rank)
    return bounds[best], [e for i, e in enumerate(constraints) if i != best]
