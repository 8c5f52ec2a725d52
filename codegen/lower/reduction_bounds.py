"""Reductions over ranges that depend on the output's axes, rewritten as products over
constant ranges.

Zero elimination leaves a gradient's reductions with bounds that depend on the output
axes (conv2d's data gradient); :func:`constant_bounds` runs such a reduction over the
smallest constant range and keeps its bounds as a ``where`` guard on the reads, checked
equivalent point by point. A sum of one read that does not use every output axis (a
convolution's gradient for a head of ones) is a product with a tensor of ones over the
ranges its variables take (:func:`times_ones`). Both make a reduction that
:func:`~tegrad.codegen.lower.product_plans.detect_contraction` can take as a contraction.
"""
from __future__ import annotations

import math

import numpy as np

from tegrad import solver
from tegrad.analysis.affine import conjunction, from_affine, to_affine
from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import (Binary, Compare, Const, IterVar, Read, Reduce, Var,
                             structural_equal)
from tegrad.ir.mapper import free_var_names, substitute
from tegrad.ir.tensor import placeholder
from tegrad.reference.evaluator import ExprEvaluator

from tegrad.codegen.tuning import MAX_CHECKED_POINTS, MAX_ONES_FACTOR
from tegrad.codegen.lower.contraction_operands import product_factors, strip_casts
from tegrad.codegen.lower.index_forms import CanonicalIndices


def times_ones(reduce_, extents, *, with_bounds=False):
    """``(reduce', ones)``: a sum of one read that does not use every output axis, as
    the sum of that read times ``ones`` (a placeholder standing for a tensor of ones,
    indexed by the output axes the read lacks and every reduction axis, each over the
    range it takes), or ``(None, None)``.

    The gradient of a convolution for a head of ones is such a sum (``dX = sum(W[...])``
    over a window, the same for every image): a product with ones makes it a
    contraction, computed as a vendor's gemm computes it. ``extents`` gives the output
    axes' extents (the output axes are its keys). ``with_bounds``: ``ones`` has the
    dimensions of :func:`_bound_dims`, whose ranges say what the reduction's bounds say
    (a head of ones' own range, lost to zero elimination), instead of the reduction
    variable's own (``"both"``: as well as it).

    >>> import tegrad as tg
    >>> w = tg.placeholder((3, 4), name="w"); k = tg.reduce_axis((0, 3), name="k")
    >>> t = tg.compute((5, 4), lambda i, j: tg.sum(w[k, j], axis=k))
    >>> r, ones = times_ones(t.op.body, {"i": 5, "j": 4})
    >>> str(r.source), ones.shape
    ('w[k, j] * ones[i, k]', (5, 3))
    """
    inner, _ = strip_casts(reduce_.source)
    if type(inner) is not Read or not _dt.is_float(inner.dtype):
        return None, None
    used = set()
    for index in inner.indices:
        aff = to_affine(index)
        # an axis whose terms cancel (a residue class's index) is not used
        used |= {n for n, c in aff.as_dict().items() if c} if aff is not None \
            else free_var_names(index)
    if all(name in used for name in extents):
        return None, None
    bound_dims = {ax.name: _bound_dims(ax, extents) if with_bounds else []
                  for ax in reduce_.axes}
    by_bounds = set()
    for dims in bound_dims.values():
        for aff, _ in dims:
            by_bounds |= set(aff.as_dict())
    shape, indices = [], []
    for name in extents:
        if name not in used and name not in by_bounds:
            shape.append(extents[name])
            indices.append(Var(name, "int64"))
    for ax in reduce_.axes:
        for aff, extent in bound_dims[ax.name]:
            shape.append(extent)
            indices.append(from_affine(aff, "int64"))
        if bound_dims[ax.name] and with_bounds != "both":
            continue
        lo_hi = _bounding_range(ax, extents)
        if lo_hi is None:
            return None, None
        lo, hi = lo_hi
        shape.append(hi - lo)
        var = Var(ax.name, ax.var.dtype)
        indices.append(var - lo if lo else var)
    # ones far larger than the data would cost more to fill than the loops they save
    limit = MAX_ONES_FACTOR * (math.prod(extents.values()) + math.prod(inner.tensor.shape))
    if math.prod(shape) > limit:
        return None, None
    ones = placeholder(tuple(shape), dtype=inner.tensor.dtype, name="ones")
    source = reduce_.source * Read(ones, tuple(indices), ones.dtype)
    return Reduce(reduce_.reducer, source, reduce_.axes, reduce_.where, reduce_.init,
                  reduce_.dtype), ones


def _bound_terms(e, op, linear=True):
    """The affine terms of ``e`` as nested ``op`` (``max``/``min``) of them, or None
    (``linear``: without divisions)."""
    if type(e) is Binary and e.op == op:
        a, b = _bound_terms(e.a, op, linear), _bound_terms(e.b, op, linear)
        return None if a is None or b is None else a + b
    aff = to_affine(e)
    return [aff] if aff is not None and (aff.is_linear or not linear) else None


def _bound_dims(ax, extents):
    """Indices ``[(affine, extent), ...]`` whose ``0 <= index < extent`` say what the
    non-constant bounds of the reduction variable ``ax`` say: ``v - L`` of extent ``H -
    L`` for a lower term ``L`` and an upper term ``H`` a constant apart, else ``v - L``
    or ``H - 1 - v`` alone (extent: the most it reaches, plus one). Empty when the
    bounds are constants or not of that form (the check of :func:`constant_bounds`
    decides whether they say the same)."""
    if type(ax.lo) is Const and type(ax.extent) is Const:
        return []
    upper = ax.extent.a if (type(ax.extent) is Binary and ax.extent.op == "sub"
                            and structural_equal(ax.extent.b, ax.lo)) else ax.hi
    lows, highs = _bound_terms(ax.lo, "max"), _bound_terms(upper, "min")
    if lows is None or highs is None:
        return []
    lows = [t for t in lows if t.as_dict()]
    highs = [t for t in highs if t.as_dict()]
    if any(not set(t.as_dict()) <= set(extents) for t in lows + highs):
        return []
    v = solver.Affine.var(ax.name)
    dims, loose = [], []
    for low in lows:
        for high in highs:
            width = high - low
            if not width.as_dict() and width.constant > 0:
                dims.append((v - low, width.constant))
                highs = [h for h in highs if h is not high]
                break
        else:
            loose.append(v - low)
    loose += [high - 1 - v for high in highs]
    if not loose:
        return dims
    found = _bounds_over(ax, {n for aff in loose for n in aff.as_dict() if n != ax.name},
                         extents)
    if found is None:
        return []
    cols, lo, hi = found
    nonempty = hi > lo
    if not nonempty.any():
        return []
    most = []
    for aff in loose:
        # (the most of an affine form over [lo, hi) is at one end)
        ends = [np.broadcast_to(aff.evaluate(dict(cols, **{ax.name: x})), x.shape)
                for x in (lo, hi - 1)]
        most.append(int(np.maximum(*ends)[nonempty].max()))
    if min(most) < 0:
        return []
    return dims + [(aff, top + 1) for aff, top in zip(loose, most)]


def _bounding_range(ax, extents):
    """``(lowest, highest + 1)`` of the values the reduction variable ``ax`` takes, its
    bounds evaluated at every value of the output axes they use; None when they use
    anything else or there are too many."""
    if type(ax.lo) is Const and type(ax.extent) is Const:
        return ax.lo.value, ax.lo.value + max(ax.extent.value, 0)
    found = _bounds_over(ax, (), extents)
    if found is None:
        return None
    _, lo, hi = found
    nonempty = hi > lo
    return (int(lo[nonempty].min()), int(hi[nonempty].max())) if nonempty.any() else None


def _bounds_over(ax, names, extents):
    """``(columns, lo, hi)``: every point of the output axes ``names`` and of those the
    bounds of the reduction variable ``ax`` use, as ``{name: column}`` (int64 arrays of
    one column, a row per point), and the bounds ``lo <= ax < hi`` at each (columns of
    the same rows); None when those axes are not all output axes (``extents``) or have
    more than :data:`MAX_CHECKED_POINTS` points."""
    hi_expr = ax.lo + ax.extent
    used = sorted(set(names) | free_var_names(ax.lo) | free_var_names(hi_expr))
    if not set(used) <= set(extents):
        return None
    grid = _grid([extents[u] for u in used])
    if grid is None:
        return None
    cols = {u: grid[:, k:k + 1] for k, u in enumerate(used)}
    evaluator = ExprEvaluator({})
    lo, hi = (np.broadcast_to(np.asarray(evaluator.at_point(e, cols), np.int64),
                              (len(grid), 1)) for e in (ax.lo, hi_expr))
    return cols, lo, hi


def constant_bounds(reduce_, extents):
    """``reduce_`` over constant ranges, or None.

    Zero elimination leaves a gradient's reductions with bounds depending on the output
    axes (conv2d's data gradient: ``yy in [max(0, i2 - 1), min(H, i2 + 2))``). Each such
    variable ``v`` is replaced by ``r``, either ``v`` itself or an index ``r == c * v +
    rest(out)`` (``c`` = +-1) of one operand's read, ``rest`` quasi-affine (a strided
    weight gradient's ``yy_s + (-i2) // 2 + 1``: ``r`` is the output position ``yy``
    that zero elimination shifted), or ``v`` less a term of its lower bound where that
    halves the range of another candidate that works (a transposed convolution's input
    row ``q`` in ``[max(0, o), ...)`` per residue class of the output: ``r = q - o``, a
    window rather than the whole image); ``r`` runs over the smallest constant range holding
    every value it takes, and the bounds become a ``where`` guard saying that the reads
    indexed by ``r`` are inside their tensors. The identity preserved: ``lo(out) <= v <
    hi(out)`` holds exactly where that guard does, checked by enumerating every
    output-axis value the bounds use and every ``r`` in the range (refused above
    :data:`MAX_CHECKED_POINTS` points). A candidate after which every index is affine
    wins over one leaving divisions in them, then the one with the fewest values of
    ``r``. ``extents`` gives the output axes' extents.

    >>> import tegrad as tg
    >>> X = tg.placeholder((1, 1, 5, 5), name="X"); W = tg.placeholder((1, 1, 3, 3), name="W")
    >>> Y = tg.nn.conv2d(X, W, padding=1); HY = tg.placeholder(Y.shape, name="HY")
    >>> dX = tg.differentiate(Y, [X], head=HY).result[0]
    >>> r = constant_bounds(dX.op.body, {"i0": 1, "i1": 1, "i2": 5, "i3": 5})
    >>> [(str(ax.lo), str(ax.extent)) for ax in r.axes]
    [('0', '3'), ('0', '3')]
    >>> str(r.source)
    'HY[i0, 0, i2 - yy + 1, i3 - xx + 1] * W[0, i1, yy, xx]'
    >>> str(r.where)
    'i2 - yy + 1 >= 0 && i2 - yy + 1 < 5 && i3 - xx + 1 >= 0 && i3 - xx + 1 < 5'
    """
    reduce_axes = {ax.name for ax in reduce_.axes}
    reads = [read for read, _ in (product_factors(reduce_.source) or [])]
    if not reads:
        return None
    new_axes, mapping, guards = [], {}, []
    for ax in reduce_.axes:
        if type(ax.lo) is Const and type(ax.extent) is Const:
            new_axes.append(ax)
            continue
        chosen = _rebox_axis(ax, reads, reduce_axes, extents)
        if chosen is None:
            return None
        axis, value, guard = chosen
        new_axes.append(axis)
        mapping[ax.name] = value
        guards += guard
    source = CanonicalIndices()(substitute(reduce_.source, mapping))
    where = reduce_.where
    if where is not None and not (type(where) is Const and where.value is True):
        if free_var_names(where) & set(mapping):
            return None
        guards.insert(0, where)
    return Reduce(reduce_.reducer, source, tuple(new_axes),
                  conjunction(guards) if guards else None, reduce_.init, reduce_.dtype)


def _rebox_axis(ax, reads, reduce_axes, extents):
    """``(IterVar r, v as an expression of r, [guard conjuncts])`` for the reduction
    variable ``ax`` (see :func:`constant_bounds`), or None."""
    # the index dimensions that use v, as affine forms; each is a candidate r. Divisions
    # of output axes may appear beside v (zero elimination's shift of a strided
    # gradient's v: ``yy + (-i2) // 2 + 1``), v itself only as a plain term.
    dims = []
    for read in reads:
        for index, size in zip(read.indices, read.tensor.shape):
            aff = to_affine(index)
            if aff is None:
                return None
            names = aff.variables()
            if ax.name not in names:
                continue
            if any(ax.name in atom.variables() for atom in aff.atoms()):
                return None
            if any(name in reduce_axes and name != ax.name for name in names):
                return None
            dims.append((aff, size))
    # every output axis the bounds or those indices use takes every value in the check
    found = _bounds_over(ax, set().union(*(aff.variables() for aff, _ in dims)) - {ax.name},
                         extents)
    if found is None:
        return None
    cols, lo, hi = found
    size = len(lo)
    nonempty = hi > lo
    if not nonempty.any():
        return None
    v = solver.Affine.var(ax.name)
    # r == c * v + rest(out): v itself, an index of v, or v less a term of its lower
    # bound (a transposed convolution's input row q from max(0, y // s): r = q - y // s)
    # (one from a bound moves the read of v with the output axes, which an index of v
    # does not: it only improves on another that works, halving its range at least)
    candidates = [(1, solver.Affine.const(0), 1)] + [
        (aff.coeff(ax.name), aff - v * aff.coeff(ax.name), 1) for aff, _ in dims
        if abs(aff.coeff(ax.name)) == 1] + [
        (1, -low, 2) for low in _bound_terms(ax.lo, "max", linear=False) or ()
        if low.as_dict() and low.variables() <= set(cols)]
    best = None
    for c, rest, weight in candidates:
        if weight > 1 and best is None:
            break
        offsets = np.broadcast_to(np.asarray(rest.evaluate(cols), np.int64), (size, 1))
        values = np.concatenate([(c * lo + offsets)[nonempty], (c * (hi - 1) + offsets)[nonempty]])
        r_lo, r_hi = int(values.min()), int(values.max())
        # v == c * (r - rest), r keeping v's name; a candidate leaving divisions in the
        # indices does not make a contraction
        v_aff = (v - rest) * c
        rank = (not all(aff.substitute({ax.name: v_aff}).is_linear for aff, _ in dims),
                weight * (r_hi - r_lo + 1))
        if best is not None and rank >= best[0]:
            continue
        if size * (r_hi - r_lo + 1) > MAX_CHECKED_POINTS:
            continue
        # every (point, r): v = c * (r - rest) inside its bounds iff every read is inside
        x = c * (np.arange(r_lo, r_hi + 1)[None, :] - offsets)  # c == 1/c
        at = {u: np.broadcast_to(col, x.shape) for u, col in cols.items()}
        at[ax.name] = x
        dims_in = []
        for d, extent in dims:
            index = d.evaluate(at)
            dims_in.append(np.broadcast_to((0 <= index) & (index < extent), x.shape))
        inside = (lo <= x) & (x < hi)
        if np.array_equal(inside, np.logical_and.reduce(dims_in) if dims_in else
                          np.ones_like(inside)):
            best = (rank, v_aff, r_lo, [k for k, d in enumerate(dims_in) if not d.all()],
                    r_hi - r_lo + 1)
    if best is None:
        return None
    _, v_aff, r_lo, needed, extent = best
    dtype = ax.var.dtype
    value = from_affine(v_aff, dtype)
    guards = []
    for k in needed:
        aff, size = dims[k]
        index = from_affine(aff.substitute({ax.name: v_aff}), dtype)
        guards += [Compare("ge", index, Const(0, index.dtype)),
                   Compare("lt", index, Const(size, index.dtype))]
    axis = IterVar(Var(ax.name, dtype), Const(r_lo, ax.lo.dtype), Const(extent, ax.extent.dtype),
                   ax.kind)
    return axis, value, guards


def _grid(extents):
    """Every point of the box ``extents`` as a row of an int64 array (one column per
    dimension), or None above :data:`MAX_CHECKED_POINTS` points."""
    if math.prod(extents) > MAX_CHECKED_POINTS:
        return None
    if not extents:
        return np.zeros((1, 0), dtype=np.int64)
    return np.indices(extents, dtype=np.int64).reshape(len(extents), -1).T
