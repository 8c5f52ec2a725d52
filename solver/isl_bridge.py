"""The one module that talks to islpy.

Everything here addresses dimensions by *name*: callers pass variable names,
parameter names and :class:`~solver.constraint.Constraint` objects, and get
names and constraints back.

Two ways in:

* :class:`IslSystem` — the fast path used by the solver.  Each of our
  constraints becomes an ``isl.Constraint`` once (cached) and sets are built by
  adding constraint objects, since parsing isl text costs about a millisecond
  per set.  Every division atom ``e // c`` becomes an extra dimension ``A``
  with ``c*A <= e <= c*A + c - 1`` (a parameter when ``e`` mentions only
  parameters, an existential set dimension otherwise) and ``e % c`` is
  ``e - c*A``: exact for emptiness, implication and the affine hull.
* textual syntax with mangled names (``v0``, ``p0``, ...; immune to names that
  are not isl identifiers) for the public :func:`to_isl` and for counting,
  where isl's own division handling is wanted.

isl is used as the exact oracle of the solver: integer emptiness,
implication (redundancy), the integer affine hull (pinned variables) and point
counting (``isl_set_count_val``; barvinok is not available).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

import islpy as isl

from .affine import Affine, FloorDiv
from .constraint import Constraint, EQ, GE

__all__ = ["IslSystem", "to_isl", "from_isl", "is_empty", "is_implied", "affine_hull",
           "count_points", "count_union_points"]

_SET = isl.dim_type.set
_PARAM = isl.dim_type.param
_DIV = isl.dim_type.div
_IN = isl.dim_type.in_


def _mangle(variables: Sequence[str], parameters: Sequence[str]) -> dict:
    names = {v: f"v{i}" for i, v in enumerate(variables)}
    names.update((p, f"p{i}") for i, p in enumerate(parameters))
    return names


def _expr_text(expr: Affine, names: dict) -> str:
    parts = []
    for atom, c in expr.terms:
        if type(atom) is str:
            try:
                text = names[atom]
            except KeyError:
                raise ValueError(f"unknown name {atom!r} in {expr}") from None
        elif isinstance(atom, FloorDiv):
            text = f"floor(({_expr_text(atom.expr, names)})/{atom.divisor})"
        else:
            text = f"(({_expr_text(atom.expr, names)}) mod {atom.divisor})"
        parts.append(f"{c}*{text}" if c != 1 else text)
    parts.append(str(expr.constant))
    return " + ".join(parts).replace("+ -", "- ")


def _set_text(variables, parameters, constraints) -> str:
    names = _mangle(variables, parameters)
    conds = []
    for c in constraints:
        truth = c.truth
        if truth is True:
            continue
        if truth is False:
            conds = ["1 = 0"]
            break
        op = "=" if c.kind == EQ else ">="
        conds.append(f"{_expr_text(c.expr, names)} {op} 0")
    params = ", ".join(names[p] for p in parameters)
    dims = ", ".join(names[v] for v in variables)
    body = f"[{dims}] : " + " and ".join(conds) if conds else f"[{dims}]"
    return f"[{params}] -> {{ {body} }}"


def _make(variables, parameters, constraints) -> isl.Set:
    return isl.Set(_set_text(variables, parameters, constraints))


def to_isl(variables: Sequence[str], parameters: Sequence[str], constraints) -> isl.Set:
    """An ``islpy.Set`` whose set/parameter dimensions carry the given names.

    >>> from tegrad.solver.constraint import ge, lt
    >>> s = to_isl(["i"], ["n"], [ge("i", 0), lt("i", "n")])
    >>> s.get_var_names(isl.dim_type.set), s.get_var_names(isl.dim_type.param)
    (['i'], ['n'])
    """
    s = _make(variables, parameters, constraints)
    for i, v in enumerate(variables):
        s = s.set_dim_name(_SET, i, v)
    for i, p in enumerate(parameters):
        s = s.set_dim_name(_PARAM, i, p)
    return s


def is_empty(variables, parameters, constraints) -> bool:
    """Whether no integer (parameter, variable) point satisfies ``constraints``."""
    constraints = list(constraints)
    return IslSystem(variables, parameters, constraints).is_empty(constraints)


def is_implied(variables, parameters, constraints, candidate: Affine) -> bool:
    """Whether ``constraints`` imply ``candidate >= 0`` over the integers."""
    constraints = list(constraints)
    system = IslSystem(variables, parameters, constraints + [Constraint(candidate, GE)])
    return system.is_implied(constraints, candidate)


def count_points(variables, constraints) -> int:
    """Exact number of integer points of a bounded, parameter-free set."""
    s = _make(variables, (), constraints)
    if not s.is_bounded():
        raise ValueError("cannot count the points of an unbounded domain")
    return int(str(s.count_val()))


def count_union_points(variables, constraint_lists) -> int:
    """Exact number of integer points in the union of bounded, parameter-free sets."""
    union = None
    for constraints in constraint_lists:
        s = _make(variables, (), constraints)
        union = s if union is None else union.union(s)
    if union is None:
        return 0
    if not union.is_bounded():
        raise ValueError("cannot count the points of an unbounded domain")
    return int(str(union.count_val()))


def affine_hull(variables, parameters, constraints):
    """Equalities (Affines ``== 0``) of the integer affine hull; None if empty.

    Only equalities over the variables, parameters and parameter divisions
    are returned (not those that need a division of variables).
    """
    constraints = list(constraints)
    return IslSystem(variables, parameters, constraints).affine_hull(constraints)


_VALS: dict = {}


def _val(v: int):
    val = _VALS.get(v)
    if val is None:
        if -(1 << 62) < v < (1 << 62):
            val = isl.Val.int_from_si(isl.DEFAULT_CONTEXT, v)
        else:
            val = isl.Val.read_from_str(isl.DEFAULT_CONTEXT, str(v))
        if len(_VALS) < 4096:
            _VALS[v] = val
    return val


class IslSystem:
    """isl view of constraints over fixed variables and parameters.

    ``universe`` lists constraints whose division atoms should be known up
    front (new atoms met later rebuild the space, which clears the cache).

    >>> from tegrad.solver.constraint import ge, le
    >>> s = IslSystem(["y"], ["p"], [])
    >>> s.is_implied([ge("y", 0), le("y", "p")], Affine.var("p"))
    True
    """

    def __init__(self, variables: Sequence[str], parameters: Sequence[str], universe=()):
        self.variables = tuple(variables)
        self.parameters = tuple(parameters)
        self.atoms: dict = {}  # (inner, divisor) -> (dim_type, index)
        self.param_atoms: list = []
        self.set_atoms: list = []
        self._dims = {v: (_SET, i) for i, v in enumerate(self.variables)}
        self._dims.update((p, (_PARAM, i)) for i, p in enumerate(self.parameters))
        self._space = None
        self._cache: dict = {}
        self._definitions: list = []
        self._discover(c.expr for c in universe)

    # -- atoms and space -----------------------------------------------------
    def _discover(self, exprs) -> None:
        before = len(self.atoms)
        for e in exprs:
            self._collect(e)
        if self._space is None or len(self.atoms) != before:
            self._build_space()

    def _collect(self, expr: Affine) -> None:
        for a, _ in expr.terms:
            if type(a) is str:
                if a not in self._dims:
                    raise ValueError(f"unknown name {a!r} in {expr}")
                continue
            self._collect(a.expr)
            key = (a.expr, a.divisor)
            if key in self.atoms:
                continue
            if a.expr.variables() <= set(self.parameters):
                self.atoms[key] = (_PARAM, len(self.parameters) + len(self.param_atoms))
                self.param_atoms.append(key)
            else:
                self.atoms[key] = (_SET, len(self.variables) + len(self.set_atoms))
                self.set_atoms.append(key)

    def _build_space(self) -> None:
        pnames = list(self.parameters) + [f"_a{i}" for i in range(len(self.param_atoms))]
        snames = list(self.variables) + [f"_e{i}" for i in range(len(self.set_atoms))]
        self._space = isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=snames, params=pnames)
        self._base = None
        self._cache = {}
        self._definitions = []
        for key in self.param_atoms + self.set_atoms:
            inner, c = key
            quotient = Affine({FloorDiv(inner, c): 1})
            # c*A <= inner <= c*A + c - 1
            self._definitions.append(self._isl(inner - quotient * c, False))
            self._definitions.append(self._isl(quotient * c + (c - 1) - inner, False))

    def _linear(self, expr: Affine) -> tuple:
        """``({(dim_type, index): coefficient}, constant)`` with atoms as dimensions."""
        coeffs: dict = {}
        const = expr.constant
        for a, k in expr.terms:
            if type(a) is str:
                dims = {self._dims[a]: 1}
                inner_const = 0
            elif isinstance(a, FloorDiv):
                dims = {self.atoms[(a.expr, a.divisor)]: 1}
                inner_const = 0
            else:  # e % c == e - c * (e // c)
                dims, inner_const = self._linear(a.expr)
                q = self.atoms[(a.expr, a.divisor)]
                dims = dict(dims)
                dims[q] = dims.get(q, 0) - a.divisor
            for d, v in dims.items():
                coeffs[d] = coeffs.get(d, 0) + k * v
            const += k * inner_const
        return coeffs, const

    def _isl(self, expr: Affine, equality: bool):
        coeffs, const = self._linear(expr)
        alloc = isl.Constraint.equality_alloc if equality else isl.Constraint.inequality_alloc
        c = alloc(self._space)
        for (tp, i), v in coeffs.items():
            if v:
                c = c.set_coefficient_val(tp, i, _val(v))
        return c.set_constant_val(_val(const))

    def _constraint(self, c: Constraint):
        out = self._cache.get(c)
        if out is None:
            out = self._isl(c.expr, c.kind == EQ)
            self._cache[c] = out
        return out

    def basic_set(self, constraints, start=None) -> isl.BasicSet:
        """The constraints as a basic set (added to ``start``, an earlier result)."""
        constraints = list(constraints)
        space = self._space
        self._discover(c.expr for c in constraints)
        if start is None or space is not self._space:
            if self._base is None:
                bset = isl.BasicSet.universe(self._space)
                for d in self._definitions:
                    bset = bset.add_constraint(d)
                self._base = bset
            bset = self._base
        else:
            bset = start
        for c in constraints:
            truth = c.truth
            if truth is True:
                continue
            if truth is False:
                return isl.BasicSet.empty(self._space)
            bset = bset.add_constraint(self._constraint(c))
        return bset

    # -- queries -----------------------------------------------------------------
    def is_empty(self, constraints, start=None) -> bool:
        return self.basic_set(constraints, start).is_empty()

    def is_implied(self, constraints, candidate: Affine, start=None) -> bool:
        """Whether ``constraints`` (and ``start``) imply ``candidate >= 0`` over the integers."""
        return self.is_empty(list(constraints) + [Constraint(-candidate - 1, GE)], start)

    def affine_hull(self, constraints):
        """Integer affine hull equalities (Affines); None when empty."""
        bset = self.basic_set(constraints)
        if bset.is_empty():
            return None
        names = {}
        for v, (tp, i) in self._dims.items():
            names[(tp, i)] = Affine.var(v)
        for key in self.param_atoms:
            names[self.atoms[key]] = key[0] // key[1]
        out = []
        for c in bset.affine_hull().get_constraints():
            if not c.is_equality():
                continue
            expr = Affine.const(_int(c.get_constant_val()))
            usable = True
            for tp, count in ((_SET, self._space.dim(_SET)), (_PARAM, self._space.dim(_PARAM))):
                for i in range(count):
                    v = _int(c.get_coefficient_val(tp, i))
                    if not v:
                        continue
                    if (tp, i) not in names:
                        usable = False
                        break
                    expr = expr + names[(tp, i)] * v
            if usable and c.get_local_space().dim(_DIV) == 0:
                out.append(expr)
        return out


def from_isl(s) -> tuple:
    """``(variable names, parameter names, [constraints of each basic set])``.

    Divisions that isl keeps as local variables come back as floor-division
    atoms, so ``{ [i] : i mod 4 = 1 }`` reads as ``i - 4*(i // 4) - 1 == 0``.
    """
    if isinstance(s, isl.BasicSet):
        s = isl.Set.from_basic_set(s)
    s = s.compute_divs().coalesce()
    set_names = s.get_var_names(_SET)
    param_names = s.get_var_names(_PARAM)
    if any(n is None for n in set_names + param_names):
        raise ValueError("every dimension of the isl set needs a name")
    pieces = [_basic_set_constraints(b, set_names, param_names, allow_var_divs=True)
              for b in s.get_basic_sets()]
    return tuple(set_names), tuple(param_names), pieces


def _int(val) -> int:
    f = Fraction(str(val))
    if f.denominator != 1:
        raise ValueError(f"non-integral isl value {val}")
    return f.numerator


def _basic_set_constraints(bset, set_names, param_names, allow_var_divs):
    constraints = bset.get_constraints()
    if not constraints:
        return []
    ls = constraints[0].get_local_space()
    divs = []  # Affine value of each local division, possibly None if unusable
    for k in range(ls.dim(_DIV)):
        aff = ls.get_div(k)
        den = _int(aff.get_denominator_val())
        if den == 0:
            divs.append(None)
            continue
        num = _aff_numerator(aff, den, set_names, param_names, divs)
        if num is None or (not allow_var_divs and num.variables() & set(set_names)):
            divs.append(None)
            continue
        divs.append(num // den)
    out = []
    for c in constraints:
        terms: dict = {}
        usable = True
        for names, tp in ((set_names, _SET), (param_names, _PARAM)):
            for i, n in enumerate(names):
                v = _int(c.get_coefficient_val(tp, i))
                if v:
                    terms[n] = v
        expr = Affine(terms, _int(c.get_constant_val()))
        for k, d in enumerate(divs):
            v = _int(c.get_coefficient_val(_DIV, k))
            if v:
                if d is None:
                    usable = False
                    break
                expr = expr + d * v
        if usable:
            out.append(_as_mod(Constraint(expr, EQ)) if c.is_equality()
                       else Constraint(expr, GE))
    return out


def _as_mod(c: Constraint) -> Constraint:
    """Read ``e - d*(e // d) + k == 0`` back as ``e % d + k == 0``."""
    for expr in (c.expr, -c.expr):
        for a, k in expr.terms:
            if isinstance(a, FloorDiv) and k == -a.divisor:
                rest = expr - Affine({a: k}) - a.expr
                if rest.is_constant:
                    return Constraint(a.expr % a.divisor + rest.constant, EQ)
    return c


def _aff_numerator(aff, den, set_names, param_names, divs):
    terms: dict = {}
    for names, tp in ((set_names, _IN), (param_names, _PARAM)):
        for i, n in enumerate(names):
            v = Fraction(str(aff.get_coefficient_val(tp, i))) * den
            if v:
                terms[n] = int(v)
    expr = Affine(terms, int(Fraction(str(aff.get_constant_val())) * den))
    for k in range(aff.dim(_DIV)):
        v = Fraction(str(aff.get_coefficient_val(_DIV, k))) * den
        if v:
            if k >= len(divs) or divs[k] is None:
                return None
            expr = expr + divs[k] * int(v)
    return expr
