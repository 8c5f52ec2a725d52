"""The one module that talks to islpy.

Everything here addresses dimensions by *name*: callers pass variable names,
parameter names and :class:`~solver.constraint.Constraint` objects, and get
names and constraints back.  Sets are built from isl's textual syntax with
mangled names (``v0``, ``p0``, ...), which is both faster than building them
through islpy's per-coefficient API and immune to names that are not isl
identifiers; :func:`to_isl` then renames the dimensions to the real names.

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

__all__ = ["to_isl", "from_isl", "is_empty", "is_implied", "affine_hull", "count_points"]

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

    >>> from solver.constraint import ge, lt
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
    return _make(variables, parameters, constraints).is_empty()


def is_implied(variables, parameters, constraints, candidate: Affine) -> bool:
    """Whether ``constraints`` imply ``candidate >= 0`` over the integers."""
    negation = Constraint(-candidate - 1, GE)
    return _make(variables, parameters, list(constraints) + [negation]).is_empty()


def count_points(variables, constraints) -> int:
    """Exact number of integer points of a bounded, parameter-free set."""
    s = _make(variables, (), constraints)
    if not s.is_bounded():
        raise ValueError("cannot count the points of an unbounded domain")
    return int(str(s.count_val()))


def affine_hull(variables, parameters, constraints):
    """Equalities (Affines ``== 0``) of the integer affine hull; None if empty.

    Hull equalities that need an existential variable are left out.
    """
    s = _make(variables, parameters, constraints)
    if s.is_empty():
        return None
    hull = s.affine_hull()
    inverse = {m: n for n, m in _mangle(variables, parameters).items()}
    out = []
    set_names = [inverse[n] for n in hull.get_var_names(_SET)]
    param_names = [inverse[n] for n in hull.get_var_names(_PARAM)]
    for c in _basic_set_constraints(hull, set_names, param_names, allow_var_divs=False):
        if c.is_equality:
            out.append(c.expr)
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
            out.append(Constraint(expr, EQ if c.is_equality() else GE))
    return out


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
