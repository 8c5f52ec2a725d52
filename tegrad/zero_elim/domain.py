"""Simplification of one term's summation domain with :mod:`solver`.

The affine conditions of a term and the ranges of its axes form an integer domain
whose parameters are the enclosing stage's variables. ``simplify_domain`` solves the
equalities (also through ``//`` and ``%``), so summation variables fixed by them
disappear; the remaining ones get tight bounds; conditions on the parameters alone
move outside the sum, and those implied by the parameters' own ranges are dropped.

>>> import tegrad as tg
>>> from tegrad.ir.expr import Var
>>> from tegrad.zero_elim.terms import expand
>>> A, H = tg.placeholder((3, 4), name="A"), tg.placeholder((3, 4), name="H")
>>> y0, y1 = tg.reduce_axis((0, 3), name="y0"), tg.reduce_axis((0, 4), name="y1")
>>> a, b = Var("a"), Var("b")
>>> g = tg.sum(H[y0, y1] * tg.if_then_else(tg.all(y0 == b, y1 == a), 1.0, 0.0), axis=[y0, y1])
>>> outer, term = solve_term_domain(expand(g)[0], {"a": (0, 4), "b": (0, 3)})
>>> outer, str(term)
((), 'H[b, a]')
"""
from __future__ import annotations

import functools

from tegrad import solver

from tegrad.ir.expr import Binary, Const, IterVar, Var
from tegrad.ir.mapper import free_var_names, substitute
from tegrad.analysis.simplify import simplify
from tegrad.analysis.affine import from_affine, from_constraint, to_affine, to_constraint
from tegrad.analysis.indices import normalize_indices
from tegrad.zero_elim.terms import Term

#: the largest coefficient or constant of a change of variables worth taking: the
#: solver's unimodular transformations of a term's domain have small entries when they
#: simplify it (+-1, the strides); entries past this (seen: 2,587,571,088 for a sum over
#: a residue class of a modulo read) do not fit the index dtype, and the term keeps its
#: own axes instead
MAX_TRANSFORM_ENTRY = 1 << 16


class _Split:
    """The conditions of a term sorted by what can be reasoned about exactly."""

    def __init__(self, conds):
        self.affine, self.residual = [], []
        for c in conds:
            con = to_constraint(c)
            if con is None:
                self.residual.append(c)
            else:
                self.affine.append(con)


def _affine_bounds(ax):
    lo, extent = to_affine(ax.lo), to_affine(ax.extent)
    if lo is None or extent is None:
        return None
    return lo, lo + extent


def solve_term_domain(term, params):
    """``term`` over the solver's simplified summation domain; its free variables range
    over ``params`` (name -> (lo, hi)).

    Returns ``(outer_conditions, term)`` where the outer conditions involve only the
    parameters, or None when the term's domain is empty (the term is zero).
    """
    split = _Split(term.conds)
    axis_names = [ax.name for ax in term.axes]
    variables = []
    for ax in term.axes:
        bounds = _affine_bounds(ax)
        if bounds is None:
            return _keep(term)
        variables.append((ax.name, bounds[0], bounds[1]))
    names = set(axis_names)
    free = set()
    for con in split.affine:
        free |= con.variables()
    for _, lo, hi in variables:
        free |= lo.variables() | hi.variables()
    parameters = sorted(free - names)
    domain = solver.Domain(variables, split.affine, parameters=parameters)
    solved = _solved(domain, tuple(axis_names), tuple(sorted(params.items())))
    if solved is None:
        return None
    if solved is _NOT_SMALL:
        return _keep(term)
    mapping, new_axes, single, inner_conds, outer_conds = solved
    new_names = {ax.name for ax in new_axes}
    inner_conds, outer_conds = list(inner_conds), list(outer_conds)

    def rewrite(e):
        e = substitute(substitute(e, mapping), single) if single else substitute(e, mapping)
        return simplify(normalize_indices(e))

    inner_conds = [rewrite(c) if single else c for c in inner_conds]
    for c in split.residual:
        c = rewrite(c)
        (inner_conds if free_var_names(c) & new_names else outer_conds).append(c)
    for c in [c for c in inner_conds if not free_var_names(c) & new_names]:
        inner_conds.remove(c)
        outer_conds.append(c)
    value = rewrite(term.value)
    return tuple(outer_conds), Term(tuple(new_axes), tuple(inner_conds), value)


def _drop_single_points(axes):
    """Axes of extent one are not loops: ``(other axes, {name: its only value})``."""
    kept, single = [], {}
    for ax in axes:
        lo = substitute(ax.lo, single) if single else ax.lo
        extent = substitute(ax.extent, single) if single else ax.extent
        if type(simplify(extent)) is Const and simplify(extent).value == 1:
            single[ax.name] = lo
        else:
            kept.append(ax if lo is ax.lo and extent is ax.extent
                        else IterVar(ax.var, lo, extent, ax.kind))
    return kept, single


def tight_axes(domain):
    """Reduce axes over ``domain``'s variables, each with its tightest bounds.

    ``max(lowers) <= v < min(uppers)``, the bounds affine in parameters and outer axes.
    """
    bounds = solver.variable_bounds(domain)
    axes = []
    for name, lo, hi in domain.variables:
        b = bounds.get(name)
        lowers = b.lower if b is not None and b.lower else (lo,)
        uppers = b.upper if b is not None and b.upper else (hi,)
        lo_e = _extreme("max", [from_affine(x) for x in lowers])
        hi_e = _extreme("min", [from_affine(x) for x in uppers])
        extent = b.extent if b is not None and b.extent is not None else None
        extent_e = from_affine(extent) if extent is not None else simplify(hi_e - lo_e)
        axes.append(IterVar(Var(name), lo_e, extent_e, "reduce"))
    return axes


def _extreme(op, exprs):
    out = exprs[0]
    for e in exprs[1:]:
        out = Binary(op, out, e, out.dtype)
    return out


def _captured_by_bounds(con, names):
    """A linear inequality over the axes is enforced by their bounds (Fourier–Motzkin)."""
    if con.is_equality:
        return False
    return all(isinstance(atom, str) or not (atom.variables() & names)
               for atom in con.expr.as_dict())


def _small(aff):
    """Every coefficient and the constant of ``aff`` at most :data:`MAX_TRANSFORM_ENTRY`
    in size (those of the divisions inside it included)."""
    aff = solver.lift(aff)
    entries = [aff.constant, *aff.as_dict().values()]
    inner = [a for a in aff.as_dict() if type(a) is not str]
    return (all(abs(v) <= MAX_TRANSFORM_ENTRY for v in entries)
            and all(_small_atom(a) for a in inner))


def _small_atom(atom):
    # a floor division or modulo (solver.FloorDiv, solver.Mod): its dividend and divisor
    return abs(atom.divisor) <= MAX_TRANSFORM_ENTRY and _small(atom.expr)


def _keep(term):
    """A term whose domain is not affine: only conditions free of its axes move out."""
    names = {ax.name for ax in term.axes}
    inner, outer = [], []
    for c in term.conds:
        (inner if free_var_names(c) & names else outer).append(c)
    return tuple(outer), Term(term.axes, tuple(inner), term.value)


#: what :func:`_solved` gives for a domain whose change of variables has entries past
#: :data:`MAX_TRANSFORM_ENTRY`
_NOT_SMALL = "not small"


#: unit: entries. The domains of a program's terms repeat: every layer of a model
#: stacking equal blocks solves the same ones (its stages differ only in the tensors
#: they read): an 8-layer transformer's differentiation solves 623 domains, 37 of them
#: distinct (and as many implied-condition sets, 26 distinct), so remembering them cuts
#: its differentiation from 5.1 to 3.3 s CPU; a few thousand entries hold any one
#: program's.
DOMAIN_MEMO_ENTRIES = 4096


@functools.lru_cache(maxsize=DOMAIN_MEMO_ENTRIES)
def _solved(domain, axis_names, params):
    """What a term's summation ``domain`` (over ``axis_names``, its parameters ranging
    over ``params``: sorted ``(name, (lo, hi))`` pairs) becomes, whatever the term's
    value: ``(mapping from the old axes to expressions of the new ones, the new axes,
    {name: value} of the axes with one value, the conditions on the new axes, the
    conditions on the parameters alone)``; None when the domain is empty,
    :data:`_NOT_SMALL` when its change of variables is not worth taking. Remembered
    (domains are immutable values; nobody changes a result: the dicts are only read)."""
    transformation = solver.simplify_domain(domain)
    new = transformation.new
    if transformation.is_empty or new.is_empty():
        return None
    if not all(_small(transformation.old_to_new[name]) for name in axis_names):
        return _NOT_SMALL
    mapping = {name: from_affine(transformation.old_to_new[name]) for name in axis_names}
    new_axes, single = _drop_single_points(tight_axes(new))
    new_names = {ax.name for ax in new_axes}
    inner = tuple(from_constraint(c) for c in new.variable_conditions
                  if not _captured_by_bounds(c, new_names | set(single)))
    outer = tuple(from_constraint(c) for c in _drop_implied(
        tuple(new.parameter_conditions), params))
    return mapping, tuple(new_axes), single, inner, outer


@functools.lru_cache(maxsize=DOMAIN_MEMO_ENTRIES)
def _drop_implied(constraints, params):
    """The ``constraints`` (a tuple) without those implied by the parameters' ranges
    (``params``: sorted ``(name, (lo, hi))`` pairs) and the others, as a tuple;
    remembered, as :func:`_solved`."""
    params = dict(params)
    kept = list(constraints)
    for con in list(kept):
        others = [c for c in kept if c is not con]
        if implied(con, others, params):
            kept.remove(con)
    return tuple(kept)


def implied(con, context, params):
    """True when the parameters' ranges and ``context`` imply the constraint ``con``."""
    names = set(con.variables())
    if any(n not in params for n in names):
        return False
    context = [c for c in context if c.variables() <= params.keys()]
    for c in context:
        names |= c.variables()
    box = [(n, params[n][0], params[n][1]) for n in sorted(names)]
    return all(solver.Domain(box, [negation] + list(context)).is_empty()
               for negation in _negations(con))


def _negations(con):
    """Constraints whose union is the complement of ``con``."""
    if con.is_equality:
        return [solver.ge(con.expr, 1), solver.le(con.expr, -1)]
    return [solver.le(con.expr, -1)]


def parameter_ranges(axes):
    """``{name: (lo, hi)}`` for axes with constant bounds (the stage's own axes)."""
    out = {}
    for ax in axes:
        if type(ax.lo) is Const and type(ax.extent) is Const:
            out[ax.name] = (ax.lo.value, ax.lo.value + ax.extent.value)
    return out

