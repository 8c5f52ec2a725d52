"""Integer iteration domains: ranged variables plus affine conditions.

A :class:`Domain` is an ordered tuple of variables ``(name, lower,
upper_exclusive)`` — bounds are Affines in the parameters and *earlier*
variables (so triangular domains are direct), or None for an open side — plus
a conjunction of :class:`~solver.constraint.Constraint` (which may contain
``//`` and ``%`` by constants), over free outer ``parameters``.

>>> from tegrad.solver.constraint import eq
>>> from tegrad.solver.affine import Affine
>>> p, q, r = (Affine.var(n) for n in "pqr")
>>> d = Domain([("r", 0, 3), ("q", 0, 8)], [eq(p, 2*q + r)], parameters=["p"])
>>> print(d)
[p] -> { r in [0, 3), q in [0, 8) : p == 2*q + r }
>>> d.with_parameters({"p": 5}).count()
1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

from . import isl_bridge
from .affine import Affine, lift
from .bounds import Bounds, InfeasibleError, bounds_of, drop_redundant_bounds, project
from .constraint import Constraint, EQ, GE, FALSE
from .system import NameSupply, lower_division_atoms

__all__ = ["Domain", "count_union", "variable_bounds"]


@dataclass(frozen=True, init=False)
class Domain:
    """Named integer variables with ranges and affine conditions (see module doc).

    ``variables`` items are ``(name, lower, upper_exclusive)`` or a bare name
    (unbounded); ``conditions`` are Constraints; ``parameters`` name the free
    outer symbols.
    """

    variables: tuple
    conditions: tuple
    parameters: tuple

    def __init__(self, variables: Sequence = (), conditions: Sequence[Constraint] = (),
                 parameters: Sequence[str] = ()):
        vs = []
        seen = set(parameters)
        if len(seen) != len(tuple(parameters)):
            raise ValueError("duplicate parameter name")
        for item in variables:
            name, lo, hi = (item, None, None) if isinstance(item, str) else item
            lo = None if lo is None else lift(lo)
            hi = None if hi is None else lift(hi)
            for b in (lo, hi):
                if b is not None and not b.variables() <= seen:
                    raise ValueError(f"bound {b} of {name} may only use parameters and "
                                     f"earlier variables")
            if name in seen:
                raise ValueError(f"duplicate name {name!r}")
            seen.add(name)
            vs.append((name, lo, hi))
        conds = []
        for c in conditions:
            if not isinstance(c, Constraint):
                raise TypeError(f"condition {c!r} is not a Constraint")
            if not c.variables() <= seen:
                raise ValueError(f"condition {c} uses unknown names "
                                 f"{sorted(c.variables() - seen)}")
            conds.append(c)
        object.__setattr__(self, "variables", tuple(vs))
        object.__setattr__(self, "conditions", tuple(conds))
        object.__setattr__(self, "parameters", tuple(parameters))

    @staticmethod
    def empty(parameters: Sequence[str] = (), variables: Sequence = ()) -> "Domain":
        """A domain without points (its only condition is ``false``)."""
        return Domain(variables, (FALSE,), parameters)

    # -- views -------------------------------------------------------------
    @property
    def names(self) -> tuple:
        """Variable names in order."""
        return tuple(v for v, _, _ in self.variables)

    def range_of(self, name: str) -> tuple:
        """``(lower, upper_exclusive)`` of a variable (None for an open side)."""
        for v, lo, hi in self.variables:
            if v == name:
                return lo, hi
        raise KeyError(name)

    def range_constraints(self) -> list:
        out = []
        for v, lo, hi in self.variables:
            x = Affine.var(v)
            if lo is not None:
                out.append(Constraint(x - lo, GE))
            if hi is not None:
                out.append(Constraint(hi - 1 - x, GE))
        return out

    def constraints(self) -> list:
        """Range constraints followed by the conditions."""
        return self.range_constraints() + list(self.conditions)

    @property
    def parameter_conditions(self) -> tuple:
        """Conditions that mention no variable (only parameters): lift these out."""
        names = set(self.names)
        return tuple(c for c in self.conditions if not c.variables() & names)

    @property
    def variable_conditions(self) -> tuple:
        """Conditions that mention at least one variable."""
        names = set(self.names)
        return tuple(c for c in self.conditions if c.variables() & names)

    @property
    def is_trivially_empty(self) -> bool:
        """A condition is constant false or a constant range is empty."""
        if any(c.truth is False for c in self.conditions):
            return True
        return any(lo is not None and hi is not None and lo.is_constant and hi.is_constant
                   and lo.constant >= hi.constant for _, lo, hi in self.variables)

    # -- queries -------------------------------------------------------------
    def is_empty(self) -> bool:
        """True when no (parameter, variable) integer point satisfies the domain."""
        if self.is_trivially_empty:
            return True
        return isl_bridge.is_empty(self.names, self.parameters, self.constraints())

    def contains(self, point: Mapping[str, int]) -> bool:
        """Whether ``point`` (values of variables and parameters) is in the domain.

        >>> Domain([("i", 0, Affine.var("n"))], parameters=["n"]).contains({"i": 3, "n": 4})
        True
        """
        for v, lo, hi in self.variables:
            x = point[v]
            if lo is not None and x < lo.evaluate(point):
                return False
            if hi is not None and x >= hi.evaluate(point):
                return False
        return all(c.evaluate(point) for c in self.conditions)

    def with_parameters(self, values: Mapping[str, int] | None) -> "Domain":
        """Substitute values for some parameters (which stop being parameters)."""
        if not values:
            return self
        sub = {k: Affine.const(int(v)) for k, v in values.items()}
        return Domain([(v, None if lo is None else lo.substitute(sub),
                        None if hi is None else hi.substitute(sub))
                       for v, lo, hi in self.variables],
                      [c for c in (c.substitute(sub) for c in self.conditions)
                       if c.truth is not True],
                      [p for p in self.parameters if p not in sub])

    def count(self, parameter_values: Mapping[str, int] | None = None) -> int:
        """Exact number of integer points (parameters must all get values).

        Variables with constant ranges that nothing else mentions are counted as a factor,
        so a large box costs nothing; isl counts the rest.

        >>> Domain([("i", 0, 4), ("j", 0, Affine.var("i") + 1)]).count()
        10
        """
        return count_union([self], parameter_values)

    def _independent_extents(self) -> dict:
        """``{name: extent}`` of variables with constant ranges mentioned by no condition
        and no other variable's bounds."""
        mentioned = set()
        for c in self.conditions:
            mentioned |= c.variables()
        for _, lo, hi in self.variables:
            for b in (lo, hi):
                if b is not None:
                    mentioned |= b.variables()
        return {v: max(0, hi.constant - lo.constant) for v, lo, hi in self.variables
                if v not in mentioned and lo is not None and hi is not None
                and lo.is_constant and hi.is_constant}

    def bounds(self) -> dict:
        """Tightest bounds of each variable; see :func:`variable_bounds`."""
        return variable_bounds(self)

    def points(self, parameter_values: Mapping[str, int] | None = None,
               tight: bool = True) -> Iterator[dict]:
        """Enumerate the points (dicts of variable values), outer variable first.

        With ``tight=False`` each variable scans its declared range and every condition
        is tested: slower, and independent of the bounds computation (a test oracle).

        >>> [pt["j"] for pt in Domain([("i", 2, 3), ("j", 0, Affine.var("i"))]).points()]
        [0, 1]
        """
        d = self.with_parameters(parameter_values)
        if d.parameters:
            raise ValueError(f"points() needs values for parameters {list(d.parameters)}")
        if d.is_trivially_empty:
            return iter(())
        if tight:
            try:
                bounds = variable_bounds(d)
            except InfeasibleError:
                return iter(())
        else:
            bounds = {v: Bounds((lo,), (hi,)) for v, lo, hi in d.variables}
        names = d.names
        for v in names:
            if not bounds[v].is_bounded:
                raise ValueError(f"variable {v} is unbounded")
        depth = {v: i for i, v in enumerate(names)}
        checks = [[] for _ in names]
        for c in d.constraints():
            if c.truth is False:
                return iter(())
            used = [depth[v] for v in c.variables()]
            if used:
                checks[max(used)].append(c)
        return _scan(names, [bounds[v] for v in names], checks, {}, 0)

    # -- isl -------------------------------------------------------------------
    def to_isl(self):
        """The domain as an ``islpy.Set`` with named dimensions."""
        return isl_bridge.to_isl(self.names, self.parameters, self.constraints())

    @staticmethod
    def from_isl(s, variable_order: Sequence[str] | None = None) -> "Domain":
        """Rebuild a Domain from a convex (single basic set) ``islpy.Set``.

        Simple bounds ``v >= L`` / ``v <= U`` over parameters and earlier
        variables become the variable's range; everything else is a condition.
        """
        names, params, pieces = isl_bridge.from_isl(s)
        order = tuple(variable_order) if variable_order is not None else names
        if sorted(order) != sorted(names):
            raise ValueError("variable_order must list exactly the set dimensions")
        if not pieces:
            return Domain.empty(params, order)
        if len(pieces) > 1:
            raise ValueError(f"the set is a union of {len(pieces)} convex pieces; a Domain "
                             "is a single conjunction")
        rest = list(pieces[0])
        variables = []
        known = set(params)
        for v in order:
            lo = hi = None
            for c in list(rest):
                if c.kind != GE or not (c.variables() - {v}) <= known:
                    continue
                a = c.expr.coeff(v)
                others = c.expr - Affine({v: a})
                if v in others.variables():
                    continue
                if a == 1 and lo is None:
                    lo = -others
                    rest.remove(c)
                elif a == -1 and hi is None:
                    hi = others + 1
                    rest.remove(c)
            variables.append((v, lo, hi))
            known.add(v)
        return Domain(variables, rest, params)

    # -- printing ----------------------------------------------------------------
    def __str__(self) -> str:
        parts = []
        for v, lo, hi in self.variables:
            if lo is not None and hi is not None:
                parts.append(f"{v} in [{lo}, {hi})")
            elif lo is not None:
                parts.append(f"{v} >= {lo}")
            elif hi is not None:
                parts.append(f"{v} < {hi}")
            else:
                parts.append(v)
        body = ", ".join(parts)
        if self.conditions:
            body += (" : " if body else ": ") + " and ".join(str(c) for c in self.conditions)
        prefix = f"[{', '.join(self.parameters)}] -> " if self.parameters else ""
        return f"{prefix}{{ {body} }}" if body else f"{prefix}{{ }}"

    def __repr__(self) -> str:
        return f"Domain({str(self)!r})"


def count_union(domains: Sequence[Domain],
                parameter_values: Mapping[str, int] | None = None) -> int:
    """Exact number of integer points in the union of domains over the same variables.

    Variables whose constant range is the same in every domain and that nothing else
    mentions are a factor of the count; isl counts the union of the rest.

    >>> from tegrad.solver.constraint import eq, ge
    >>> i = Affine.var("i")
    >>> count_union([Domain([("i", 0, 10)], [ge(i, 7)]), Domain([("i", 0, 10)], [eq(i, 0)])])
    4
    """
    ds = [d.with_parameters(parameter_values) for d in domains]
    for d in ds:
        if d.parameters:
            raise ValueError(f"count() needs values for parameters {list(d.parameters)}")
        if d.names != ds[0].names:
            raise ValueError("count_union needs domains over the same variables")
    ds = [d for d in ds if not d.is_trivially_empty]
    if not ds:
        return 0
    factor_sets = [d._independent_extents() for d in ds]
    factors = {v: n for v, n in factor_sets[0].items()
               if all(fs.get(v) == n for fs in factor_sets[1:])}
    total = 1
    for n in factors.values():
        total *= n
    if total == 0:
        return 0
    names = [v for v in ds[0].names if v not in factors]
    if not names and all(not d.conditions for d in ds):
        return total
    rest = [[c for c in d.constraints() if not c.variables() & factors.keys()] for d in ds]
    if len(rest) == 1:
        return total * isl_bridge.count_points(names, rest[0])
    return total * isl_bridge.count_union_points(names, rest)


def _scan(names, bounds, checks, point, k):
    if k == len(names):
        yield dict(point)
        return
    lo, hi = bounds[k].evaluate(point)
    v = names[k]
    for x in range(lo, hi):
        point[v] = x
        if all(c.evaluate(point) for c in checks[k]):
            yield from _scan(names, bounds, checks, point, k + 1)
    point.pop(v, None)


def variable_bounds(domain: Domain) -> dict:
    """Tightest bounds of each variable in terms of parameters and outer variables.

    Returns ``{name: Bounds}`` meaning ``max(lower) <= v < min(upper)`` (all
    ``[0, 0)`` when the constraints are visibly contradictory).  The
    bounds come from Fourier–Motzkin projection (divisions over variables are
    first replaced by quotient/remainder variables, which are projected out);
    bounds implied by the others are dropped exactly with isl.

    >>> i = Affine.var("i")
    >>> d = Domain([("i", 0, 10), ("j", 0, 10)], [Constraint(i - Affine.var("j"), GE)])
    >>> print(variable_bounds(d)["j"].format("j"))
    0 <= j < i + 1
    """
    cached = getattr(domain, "_bounds", None)  # set by simplify_domain
    if cached is not None:
        return dict(cached)
    names = NameSupply(list(domain.names) + list(domain.parameters))
    constraints, lowered = lower_division_atoms(domain.constraints(), domain.names, names)
    aux = [x for rec in lowered for x in (rec.quotient, rec.remainder)]
    order = list(domain.names) + aux
    ineqs = []
    context = []
    for c in constraints:
        if not c.variables() & set(order):
            context.append(c)
        elif c.kind == EQ:
            ineqs.extend((c.expr, -c.expr))
        else:
            ineqs.append(c.expr)
    try:
        per_var, rest = project(ineqs, order)
    except InfeasibleError:
        return {v: Bounds((Affine.const(0),), (Affine.const(0),)) for v in domain.names}
    per_var = {v: per_var[v] for v in domain.names}
    tight = drop_redundant_bounds(per_var, rest, list(domain.names), domain.parameters, context)
    return {v: bounds_of(tight[v], v) for v in domain.names}
