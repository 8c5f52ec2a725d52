"""Zero elimination of one compute stage.

The body is expanded into terms (:mod:`.terms`); each term's summation domain is
simplified (:mod:`.domain`); terms that end on the same domain are added back into one
sum; a term whose output index is fixed only by data (``I[b] == v``: a gradient of a
data-dependent read) becomes a scatter-accumulate over its own domain instead of a
gather that would scan that domain for every output element; so does a term whose
gather would search a domain smaller than the output for the points hitting each output
element, one whose index map is invertible (a direct gather: ``dx[x] = dy[x - 1]``) only
when it writes at most half of the output (the gradient of a slice), and a term selected
by data on its own axes that shares no loop, when its scatter visits fewer points (the
max-pool gradient over overlapping windows). Shifted reads (``blur[x] = in[x] + in[x +
1]``) thus get gathers, each term guarded by its consumer's domain:
``din[x] = (x < N - 1 ? dblur[x] : 0) + (x >= 1 ? dblur[x - 1] : 0)``.

With the supports of the stages already rewritten (:mod:`.support`), each term is first
restricted to where the gradient stages it multiplies by can be nonzero.

Reductions that depend on only some of the stage's axes then move into stages of their
own (:mod:`.hoist`). The result computes the same values as the stage:
``stage[x] == optimized[x]`` for every ``x`` in the stage's shape.
"""
from __future__ import annotations

from collections import Counter
from fractions import Fraction

from tegrad.ir.expr import (Binary, Const, IterVar, Reduce, Select, TupleReduce, Var,
                            structural_equal)
from tegrad.ir.mapper import free_var_names, fresh_name, substitute, walk
from tegrad.analysis.cost import CountError, stage_cost
from tegrad.analysis.simplify import simplify
from tegrad.ir.stages import StageMapper
from tegrad.ir.tensor import ScatterTarget, compute_stage, scatter_stage
from tegrad.analysis.affine import conjunction, to_affine, to_constraint
from tegrad.analysis.kronecker import equality_sides
from tegrad.zero_elim.domain import parameter_ranges, solve_term_domain
from tegrad.zero_elim.hoist import hoist_invariant_reductions
from tegrad.analysis.indices import normalize_indices
from tegrad.zero_elim.terms import Term, expand, merge_terms


def _zero(dtype):
    return Const(0, dtype)


def optimize_stage(t, supports=None):
    """The stage of ``t`` with its zeros eliminated, as a new tensor (or ``t`` itself).

    With ``supports`` (:class:`~tegrad.zero_elim.support.Supports` of the stages already
    rewritten), each term sums only where the stages it multiplies by can be nonzero,
    and the new stage's own support is recorded there.
    """
    return _OptimizeStage(supports)(t)


class _OptimizeStage(StageMapper):
    """Zero elimination rewrites compute stages; inputs, scatters and scans stay as they
    are."""

    def __init__(self, supports):
        self.supports = supports

    def map_placeholder(self, t):
        return t

    map_scatter = map_scan = map_placeholder

    def map_compute(self, t):
        if type(t.op.body) is TupleReduce:
            return t  # a component of a reduction of a tuple: a forward value, no zeros
        return _optimize_compute(t, self.supports)


def _optimize_compute(t, supports=None):
    op = t.op
    params = parameter_ranges(op.axes)
    axis_names = [ax.name for ax in op.axes]
    gathers, scatters = [], []
    for term in expand(op.body, taken=axis_names):
        if supports is not None:
            term = supports.guard(term)
        pinned, data = _scatter_index(term, axis_names)
        if data:
            scatters.append((term, pinned))
            continue
        simplified = solve_term_domain(term, params)
        if simplified is None:
            continue
        if _searching(pinned, simplified, term, t.size):
            scatters.append((term, pinned))
            continue
        gathers.append((simplified, term, pinned))
    support = _support_alternatives(gathers, scatters, params)
    out = _rewritten(t, gathers, scatters)
    if supports is not None:
        supports.record(out, support, op.axes)
    return out


def _support_alternatives(gathers, scatters, params):
    """Per term, the conditions on the stage's axes outside which the term is zero."""
    alternatives = [list(simplified[0]) for simplified, _, _ in gathers]
    for term, _ in scatters:
        simplified = solve_term_domain(term, params)
        if simplified is not None:
            alternatives.append(list(simplified[0]))
    return alternatives


def _rewritten(t, gathers, scatters):
    """The stage from its solved gather terms and its scatter terms."""
    op = t.op
    axis_names = [ax.name for ax in op.axes]
    gathers = _scatter_cheaper_groups(t, gathers, scatters)
    body = _gather_body(gathers, t.dtype)
    body, _ = hoist_invariant_reductions(op.name, op.axes, body)
    if not scatters:
        if body is op.body or bool(body == op.body):
            return t
        return compute_stage(op.name, op.axes, body)
    init = None
    if not (type(body) is Const and body.value == 0):
        init = compute_stage(op.name + "_gather", op.axes, body)
    out = init
    groups = _scatter_groups(scatters, axis_names)
    for k, group in enumerate(groups):
        name = op.name if k == len(groups) - 1 else f"{op.name}_scatter{k}"
        out = _scatter_stage(name, t, op.axes, group, out)
    return out


def _gather_body(gathers, dtype):
    """``sum over groups of (outer ? sum_axes[inner] value : 0)``, equal domains merged."""
    groups = []
    for outer, term in gathers:
        # data-dependent conditions do not shrink loops: terms differing only in them
        # can share one (merge_terms), so only affine conditions separate groups
        outer, data = _split_affine(outer)
        wrapped = Term(term.axes, term.conds + data, term.value)
        for g in groups:
            if bool(_conds_key(g[0]) == _conds_key(outer)):
                g[1].append(wrapped)
                break
        else:
            groups.append((outer, [wrapped]))
    body = None
    for outer, terms in groups:
        inner = None
        for term in merge_terms(terms):
            e = term.to_expr()
            inner = e if inner is None else Binary("add", inner, e, dtype)
        if outer:
            inner = Select(conjunction(outer), inner, _zero(dtype), dtype)
        body = inner if body is None else Binary("add", body, inner, dtype)
    return simplify(body) if body is not None else _zero(dtype)


def _conds_key(conds):
    """The conditions as a multiset, equal for the same conditions in any order: their
    structural hashes and equality, not their printed text (sorting by it printed every
    condition of every term again: 2.9 of 14 s of differentiating a 16-step GRU)."""
    return frozenset(Counter(conds).items())

def _split_affine(conds):
    """``(affine conditions, data-dependent conditions)``."""
    return (tuple(c for c in conds if to_constraint(c) is not None),
            tuple(c for c in conds if to_constraint(c) is None))


def _scatter_index(term, axis_names):
    """``(pinned, data)``: output axes pinned by the term, and whether by data.

    Output axes are pinned by equalities ``v == e`` with ``e`` over the term's axes;
    ``pinned`` is None unless every output axis is pinned or one ``e`` depends on data.
    A term pinned by data (a read: a gather would scan the term's domain for every
    output point) must scatter.
    """
    axes = {ax.name for ax in term.axes}
    if not axes or any(type(ax.lo) is not Const or type(ax.extent) is not Const
                       for ax in term.axes):
        return None, False
    pinned, data = {}, False
    for c in term.conds:
        sides = equality_sides(c)
        if sides is None:
            continue
        for var, other in (sides, sides[::-1]):
            if type(var) is Var and var.name in axis_names and var.name not in pinned:
                names = free_var_names(other)
                if names & set(axis_names) or (names and not names & axes):
                    continue  # (a constant pins the axis too: a slice, a stacked step)
                pinned[var.name] = other
                data |= to_affine(other) is None
                break
    if data:
        return pinned, True
    if len(pinned) != len(axis_names):
        return None, False
    return pinned, False


def _box(term):
    """Points of the term's rectangular domain (its axes have constant bounds)."""
    box = 1
    for ax in term.axes:
        box *= ax.extent.value
    return box


def _direct(pinned, term, simplified):
    """The term's index map is invertible: the pinned output axes are ``x == A y + c``
    with ``A`` square over the term's axes ``y`` and of nonzero determinant, so its
    gather computes the one point it reads, ``y == A^-1 (x - c)`` under conditions on
    ``x``, with no loop left (a shift, a transpose, a shear, a stride). Output axes
    pinned to constants (``x0 == 3``: one step of a stacked tensor) only select the
    slice; the other pinned axes must be that invertible map."""
    if not pinned or simplified[1].axes:
        return False
    names = [ax.name for ax in term.axes]
    rows = []
    for e in pinned.values():
        aff = to_affine(e)
        if aff is None or not all(isinstance(atom, str) for atom in aff.as_dict()):
            return False  # a division or a modulo: not linear in the term's axes
        if any(aff.coeff(n) for n in names):
            rows.append([aff.coeff(n) for n in names])
        # else an axis pinned to a constant: a condition on the output point alone
    return len(rows) == len(names) and _determinant(rows) != 0


def _determinant(rows):
    """The determinant of a small square matrix (exact, by Gaussian elimination)."""
    m = [[Fraction(v) for v in row] for row in rows]
    det = Fraction(1)
    for col in range(len(m)):
        pivot = next((r for r in range(col, len(m)) if m[r][col] != 0), None)
        if pivot is None:
            return 0
        if pivot != col:
            m[col], m[pivot] = m[pivot], m[col]
            det = -det
        det *= m[col][col]
        for r in range(col + 1, len(m)):
            f = m[r][col] / m[col][col]
            m[r] = [a - f * b for a, b in zip(m[r], m[col])]
    return det


def _searching(pinned, simplified, term, size):
    """A fully pinned term must scatter when its gather would search: each output point
    loops over the term's domain to find the few points that hit it (an index map that
    is not invertible), and that domain is smaller than the output."""
    if not pinned or _direct(pinned, term, simplified):
        return False
    return _box(term) < size


def _merge_key(outer, term):
    """Gathers with equal keys share one loop (see :func:`_gather_body`)."""
    return (_conds_key(_split_affine(outer)[0]), term.axes,
            _conds_key(_split_affine(term.conds)[0]))


def _scatter_cheaper_groups(t, gathers, scatters):
    """Move fully pinned terms to ``scatters`` where scattering visits fewer points.

    Terms whose gathers are direct (an invertible index map: a shift, a transpose, a
    stride) scatter, together, only when they write at most half the output (a slice's
    gradient). Other terms over one domain scatter together, one pass with an
    accumulation each (the bilinear-resize gradient: four taps per output point); a
    lone term scatters when it is selected by data on its own axes and shares no loop
    with other gathers (the max-pool gradient over overlapping windows). Dense single
    terms stay gathers, which write each output once.
    """
    keys = [_merge_key(*g[0]) for g in gathers]
    groups = []
    for k, (simplified, term, pinned) in enumerate(gathers):
        if not pinned or len(pinned) != len(t.op.axes):
            continue
        for group in groups:
            if structural_equal(group[0][1].axes, term.axes):
                group.append((k, term, pinned))
                break
        else:
            groups.append([(k, term, pinned)])
    moved = set()
    for group in groups:
        direct = all(_direct(p, term, gathers[k][0]) for k, term, p in group)
        if direct and 2 * _box(group[0][1]) > t.size:
            continue  # the scatter would write more than half the output (see below)
        if len(group) == 1 and not direct:
            k, term, _ = group[0]
            alone = sum(1 for key in keys if bool(key == keys[k])) == 1
            if not (_sparse(term) and alone):
                continue
        indices = [k for k, _, _ in group]
        scatter = _scatter_stage(t.op.name, t, t.op.axes, [(term, p) for _, term, p in group],
                                 None)
        if direct:
            # a direct gather visits each output point once and computes where it
            # reads, in parallel and vectorised (blur: dx[x] = dy[x] + dy[x - 1]); the
            # scatter is kept only where it writes at most half its output (a slice)
            move = _at_most_half(scatter, t.size)
        else:
            gather = _stage_of(t, _gather_body([gathers[k][0] for k in indices], t.dtype))
            move = _fewer_iterations(scatter, gather)
        if move:
            scatters.extend((term, p) for _, term, p in group)
            moved.update(indices)
    return [g[0] for k, g in enumerate(gathers) if k not in moved]


def _fewer_iterations(a, b):
    """``a`` iterates fewer points than ``b`` (False when either cannot be counted)."""
    try:
        return stage_cost(a).iterations < stage_cost(b).iterations
    except CountError:
        return False


def _at_most_half(scatter, size):
    """The scatter visits at most ``size / 2`` points (False when they cannot be
    counted)."""
    try:
        return 2 * stage_cost(scatter).iterations <= size
    except CountError:
        return False


def _stage_of(t, body):
    return compute_stage(t.op.name, t.op.axes, body)


def _scatter_groups(scatters, axis_names):
    """Scatter terms with the same domain (their axes and unpinned output axes) grouped."""
    groups = []
    for term, pinned in scatters:
        free = tuple(n for n in axis_names if n not in pinned)
        for key, group in groups:
            if key[1] == free and structural_equal(key[0], term.axes):
                group.append((term, pinned))
                break
        else:
            groups.append(((term.axes, free), [(term, pinned)]))
    return [group for _, group in groups]


def _sparse(term):
    """The term is selected by a data-dependent condition on its own axes."""
    names = {ax.name for ax in term.axes}
    return any(to_constraint(c) is None and free_var_names(c) & names for c in term.conds)


def _scatter_stage(name, t, out_axes, group, init):
    """One pass over the group's domain, ``out[pinned or v] += value`` for each term.

    The domain is the unpinned output axes and the terms' axes (shared by the group).
    """
    term0, pinned0 = group[0]
    domain_axes = [IterVar(Var(ax.name), ax.lo, ax.extent, "data")
                   for ax in out_axes if ax.name not in pinned0]
    # the terms' axes are rectangular (_scatter_index keeps only such terms)
    domain_axes += [IterVar(ax.var, ax.lo, ax.extent, "data") for ax in term0.axes]
    # a domain axis named as a reduction axis inside a value (a second derivative sums
    # again over the forward's axis) is renamed: a scatter's axes and the reductions of
    # its targets may not share names
    inner = {ax.name for term, _ in group for e in (term.value, *term.conds)
             for node in walk(e) if type(node) is Reduce for ax in node.axes}
    taken = inner | {ax.name for ax in domain_axes}
    renamed = {}
    for k, ax in enumerate(domain_axes):
        if ax.name in inner:
            renamed[ax.name] = Var(fresh_name(ax.name, taken), ax.var.dtype)
            taken.add(renamed[ax.name].name)
            domain_axes[k] = IterVar(renamed[ax.name], ax.lo, ax.extent, "data")
    shift = {ax.name: ax.var + ax.lo.value for ax in domain_axes if ax.lo.value != 0}
    axes = tuple(IterVar(ax.var, Const(0, ax.lo.dtype), ax.extent, "data") for ax in domain_axes)
    targets = []
    for term, pinned in group:
        def rewrite(e, pinned=pinned):
            e = substitute(e, pinned)
            e = substitute(e, renamed) if renamed else e
            e = substitute(e, shift) if shift else e
            return simplify(normalize_indices(e))

        indices = tuple(rewrite(pinned[ax.name]) if ax.name in pinned else rewrite(ax.var)
                        for ax in out_axes)
        conds = [rewrite(c) for c in term.conds if not _is_pinning(c, pinned)]
        conds = [c for c in conds if not (type(c) is Const and c.value is True)]
        targets.append(ScatterTarget(indices, rewrite(term.value),
                                     conjunction(conds) if conds else None))
    return scatter_stage(name, t.shape, axes, _merged_targets(targets), init)


def _merged_targets(targets):
    """Targets writing the same indices under the same condition, added into one.

    ``out[I] += a if c; out[I] += b if c`` equals ``out[I] += a + b if c`` up to rounding,
    and the sum is the better of the two: a derivative expanded into terms that cancel
    (``tanh' = 1 - tanh**2`` where tanh is saturated, so the two terms are equal and of
    opposite sign) cancels exactly at each point, instead of leaving the rounding of
    large partial sums accumulated in different orders (and one index computation and
    one store serve both).
    """
    merged = []
    for target in targets:
        for k, kept in enumerate(merged):
            if (structural_equal(kept.indices, target.indices)
                    and structural_equal(kept.where, target.where)):
                value = Binary("add", kept.value, target.value, kept.value.dtype)
                merged[k] = ScatterTarget(kept.indices, value, kept.where)
                break
        else:
            merged.append(target)
    return merged


def _is_pinning(c, pinned):
    sides = equality_sides(c)
    if sides is None:
        return False
    for var, other in (sides, sides[::-1]):
        if type(var) is Var and var.name in pinned and pinned[var.name] is other:
            return True
    return False
