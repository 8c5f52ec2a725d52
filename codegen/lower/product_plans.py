"""Detection of contractions from a stage's access pattern, and their matrix-product plan.

A stage is a *contraction* when its body is (up to an epilogue of the output's axes, see
below) a ``sum`` reduction, over rectangular axes, of a product of two reads, possibly
under casts, whose indices are affine (no ``//`` or ``%``) in the stage's axes, or (for a
reduction without a guard) whose row-major element offset is, every index staying inside
its dimension: a reshape's unravelled index ``x[n, k // 676, (k // 26) % 26, k % 26]``
is element ``6760 n + k``. Each axis
then has a role, read off the element strides of the two reads (a read's stride for an
axis is the sum over its index dimensions of the axis's coefficient times that
dimension's row-major stride):

- ``m``: an output axis read by the first operand only;
- ``n``: an output axis read by the second operand only;
- ``batch``: an output axis read by both;
- ``k``: a reduce axis read by both.

So ``dense``, ``matmul``, a batched matmul, a transposed operand and a user's own
einsum-like stage are recognised alike, whatever they are called. Refused (``None``):
other reducers, a reduce axis read by one operand only, an output axis read by neither,
non-affine or data-dependent indices, reads that can leave their tensor (unless the
reduction has a ``where`` guard), non-constant reduction bounds, anything but a product
of two reads.

The reduction's ``where`` condition is kept as :attr:`Contraction.guard`; when it only
says that one operand's read is inside its tensor (conv2d's padding), that operand is
described over its zero-padded array (:attr:`Operand.padding`), which the plan reads;
an expression around the reduction that uses only the output's axes (``dense``'s bias)
is kept as :attr:`Contraction.epilogue`, with the reduced value as the variable
:data:`ACC`. :func:`gemm_plan` maps a guard-free contraction onto one
:class:`gemm.GemmSpec` (axes that do not merge into one strided axis become offset
tables).

>>> import tegrad as tg
>>> a = tg.placeholder((8, 3), name="a"); b = tg.placeholder((3, 5), name="b")
>>> c = detect_contraction(tg.ops.matmul(a, b))
>>> c.m_axes, c.n_axes, c.k_axes
(('ax0',), ('ax1',), ('rk',))
>>> c.a.strides
{'ax0': 3, 'rk': 1}
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from tegrad import solver
from tegrad.analysis.affine import conjunction, conjuncts, from_affine, to_affine
from tegrad.analysis.intervals import indices_inside
from tegrad.ir import dtypes as _dt
from tegrad.ir import reduction as _red
from tegrad.ir.expr import (Binary, Cast, Compare, Const, IterVar, Read, Reduce, Var,
                             structural_equal)
from tegrad.ir.mapper import IdentityMapper, free_var_names, substitute, walk
from tegrad.reference.evaluator import ExprEvaluator
from tegrad.ir.tensor import (ComputeOp, ScatterOp, ScatterTarget, compute_stage,
                               placeholder, scatter_stage)

from tegrad.codegen.kernels.gemm import GemmSpec

#: the name of the reduced value in :attr:`Contraction.epilogue`
ACC = "_contraction_acc"


def row_major_strides(shape):
    """Element strides of a C-ordered array.

    >>> row_major_strides((2, 3, 4))
    (12, 4, 1)
    """
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


@dataclass(frozen=True, eq=False)
class Operand:
    """One read of a contraction: ``tensor`` at element ``offset + sum(strides[v] * v)``,
    its value cast to ``dtype`` (the tensor's own dtype when there is no cast)."""

    tensor: object
    strides: dict
    offset: int
    dtype: str
    #: ``((low, high), ...)`` zeros around each dimension: strides and offset are those
    #: of the zero-padded array (empty: the tensor itself)
    padding: tuple = ()

    @property
    def padded_shape(self):
        if not self.padding:
            return self.tensor.shape
        return tuple(d + lo + hi for d, (lo, hi) in zip(self.tensor.shape, self.padding))

    @property
    def has_cast(self):
        return self.dtype != self.tensor.dtype


@dataclass(frozen=True, eq=False)
class Contraction:
    """``out[axes] = epilogue(sum(a * b for k_axes in extents if guard))``.

    ``extents`` and ``lows`` give every axis's range ``[low, low + extent)`` (output
    axes start at 0); ``out_strides`` are the output's element strides per output axis.
    """

    output: object
    a: Operand
    b: Operand
    m_axes: tuple
    n_axes: tuple
    batch_axes: tuple
    k_axes: tuple
    extents: dict
    lows: dict
    out_strides: dict
    dtype: str
    guard: Optional[object] = None
    epilogue: Optional[object] = None
    #: the tensor of ones that is one operand (see :func:`times_ones`), or None
    ones: Optional[object] = None

    @property
    def flops(self):
        n = 2
        for ext in self.extents.values():
            n *= ext
        return n


def detect_contraction(tensor):
    """The :class:`Contraction` that ``tensor``'s stage computes, or None."""
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return None
    reduce_, epilogue = _split_epilogue(op.body, [ax.name for ax in op.axes])
    if reduce_ is None or reduce_.reducer is not _red.sum or reduce_.init is not None:
        return None
    if not _dt.is_float(reduce_.dtype):
        return None
    extents, lows = {}, {}
    for ax in op.axes:
        extents[ax.name], lows[ax.name] = ax.extent.value, 0
    ones = None
    if _product_factors(reduce_.source) is None:
        # the ones read by the reduction variables alone, else by what bounds them, else
        # by both
        for with_bounds in (False, True, "both"):
            times, ones = times_ones(reduce_, extents, with_bounds=with_bounds)
            if times is None:
                return None
            boxed = constant_bounds(times, extents)
            if boxed is not None:
                reduce_ = boxed
                break
        else:
            return None
    if not all(type(ax.lo) is Const and type(ax.extent) is Const for ax in reduce_.axes):
        reduce_ = constant_bounds(reduce_, extents)
        if reduce_ is None:
            return None
    for ax in reduce_.axes:
        if ax.extent.value < 1:
            return None
        extents[ax.name], lows[ax.name] = ax.extent.value, ax.lo.value
    factors = _product_factors(reduce_.source)
    if factors is None:
        return None
    guard = reduce_.where
    if type(guard) is Const and guard.value is True:
        guard = None
    ranges = [_index_ranges(read, extents, lows) for read, _ in factors]
    # Without a guard, an operand may be read through its row-major offset alone.
    flat = [rng is None and guard is None for rng in ranges]
    ranges = [_flat_range(read, extents, lows) if f else rng
              for (read, _), rng, f in zip(factors, ranges, flat)]
    if None in ranges:
        return None
    paddings = [None, None]
    if guard is not None:
        found = _guard_padding(guard, [read for read, _ in factors], ranges)
        if found is not None:
            which, pads = found
            paddings[which] = pads
    operands = []
    for (read, dtype), rng, pads, f in zip(factors, ranges, paddings, flat):
        # Under a guard (conv2d's padding) a read may leave its tensor where it fails.
        operand = _operand(read, dtype, rng, lows, pads, guarded=guard is not None, flat=f)
        if operand is None:
            return None
        operands.append(operand)
    a, b = operands
    data = [ax.name for ax in op.axes]
    roles = {"m": [], "n": [], "batch": [], "k": []}
    for name in data:
        in_a, in_b = a.strides.get(name, 0) != 0, b.strides.get(name, 0) != 0
        if not (in_a or in_b):
            return None
        roles["batch" if in_a and in_b else "m" if in_a else "n"].append(name)
    for ax in reduce_.axes:
        # (an axis of one value may have stride 0: its strides can cancel)
        if extents[ax.name] > 1 and (a.strides.get(ax.name, 0) == 0
                                     or b.strides.get(ax.name, 0) == 0):
            return None
        roles["k"].append(ax.name)
    out_strides = dict(zip(data, row_major_strides(tensor.shape)))
    return Contraction(tensor, a, b, tuple(roles["m"]), tuple(roles["n"]),
                       tuple(roles["batch"]), tuple(roles["k"]), extents, lows, out_strides,
                       reduce_.dtype, guard, epilogue, ones)


class _ReplaceReduce(IdentityMapper):
    def __init__(self, target, var):
        self.target, self.var = target, var

    def map_reduce(self, e, *args):
        return self.var if e == self.target else e


def _split_epilogue(body, data_axes):
    """``(reduce, epilogue)``: the body's one reduction and the body around it (None when
    the body is the reduction), or ``(None, None)``."""
    if type(body) is Reduce:
        return body, None
    reductions = {node for node in walk(body) if type(node) is Reduce}  # structural
    if len(reductions) != 1:
        return None, None
    target = reductions.pop()
    epilogue = _ReplaceReduce(target, Var(ACC, target.dtype))(body)
    if not free_var_names(epilogue) <= set(data_axes) | {ACC}:
        return None, None
    return target, epilogue


#: the most elements the ones of :func:`times_ones` have, in units of the output's and
#: the read tensor's elements together
MAX_ONES_FACTOR = 16


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
    inner, _ = _strip_casts(reduce_.source)
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


#: the most points (output-axis values times reduction-variable values) enumerated to
#: check that rewritten reduction bounds are equivalent
MAX_CHECKED_POINTS = 1 << 16


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
    reads = [read for read, _ in (_product_factors(reduce_.source) or [])]
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
    source = _CanonicalIndices()(substitute(reduce_.source, mapping))
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


class _CanonicalIndices(IdentityMapper):
    """Reads with affine indices written in canonical form (``i2 - yy + 1``)."""

    def finish(self, e, out):
        if type(out) is not Read:
            return out
        indices = []
        for i in out.indices:
            aff = to_affine(i)
            indices.append(i if aff is None else from_affine(aff, i.dtype))
        return Read(out.tensor, tuple(indices), out.dtype)


def _strip_casts(e):
    """``(inner, dtype)``: ``e`` without float-to-float casts, and ``e``'s dtype."""
    dtype = e.dtype
    while type(e) is Cast and _dt.is_float(e.a.dtype):
        e = e.a
    return e, dtype


def _product_factors(source):
    """``[(read, dtype), (read, dtype)]`` when ``source`` multiplies two reads."""
    e, _ = _strip_casts(source)
    if type(e) is not Binary or e.op != "mul":
        return None
    out = []
    for factor in (e.a, e.b):
        inner, dtype = _strip_casts(factor)
        if type(inner) is not Read:
            return None
        out.append((inner, dtype))
    return out


def _index_ranges(read, extents, lows):
    """``[(affine, lowest, highest), ...]`` per index of ``read`` over the domain, or None
    when an index is not linear in the stage's axes."""
    out = []
    for index in read.indices:
        found = _affine_range(to_affine(index), extents, lows)
        if found is None:
            return None
        out.append(found)
    return out


def _affine_range(aff, extents, lows):
    """``(aff, lowest, highest)`` over the domain, or None when ``aff`` is None or not
    linear in the stage's axes."""
    if aff is None or not aff.is_linear or not set(aff.as_dict()) <= set(extents):
        return None
    lo = hi = aff.constant
    for name, coeff in aff.as_dict().items():
        first, last = lows[name], lows[name] + extents[name] - 1
        lo += min(coeff * first, coeff * last)
        hi += max(coeff * first, coeff * last)
    return aff, lo, hi


def _flat_range(read, extents, lows):
    """``[(affine, lowest, highest)]``, the row-major element offset of ``read`` when that
    is linear in the stage's axes though its indices are not (a reshape's unravelled
    index read through: ``676*(k//676) + 26*((k//26)%26) + k%26 == k``) and every index
    provably stays inside its dimension; else None."""
    box = {name: (lows[name], lows[name] + extents[name] - 1) for name in extents}
    if not indices_inside(read.indices, read.tensor.shape, box):
        return None
    offset = 0
    for index, step in zip(read.indices, row_major_strides(read.tensor.shape)):
        aff = to_affine(index)
        if aff is None:
            return None
        offset = aff * step + offset
    found = _affine_range(solver.expand_divisions(offset), extents, lows)
    return None if found is None else [found]


def _operand(read, dtype, ranges, lows, padding, *, guarded, flat=False):
    """The :class:`Operand` of ``read`` (over its zero-padded array when ``padding``);
    None if an index can leave the (padded) array, unless ``guarded``. ``flat``:
    ``ranges`` is the one range of :func:`_flat_range`."""
    tensor = read.tensor
    padding = tuple(padding) if padding else ()
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(tensor.shape, padding)) if padding \
        else (tensor.size,) if flat else tensor.shape
    shifts = [lo for lo, _ in padding] if padding else [0] * len(shape)
    strides, offset = {}, 0
    for (aff, lo, hi), size, step, shift in zip(ranges, shape, row_major_strides(shape),
                                                shifts):
        if (lo + shift < 0 or hi + shift >= size) and not (guarded and not padding):
            return None
        for name, coeff in aff.as_dict().items():
            strides[name] = strides.get(name, 0) + coeff * step
        offset += (aff.constant + shift) * step
    # The reduction's lower bounds move the origin: element = offset + sum(s * (v - low)).
    offset += sum(s * lows[name] for name, s in strides.items())
    strides = {name: s for name, s in strides.items() if s != 0}
    return Operand(tensor, strides, offset, dtype, padding)


def _as_nonnegative(c):
    """The affine ``E`` with ``c`` equivalent to ``E >= 0``, or None."""
    if type(c) is not Compare:
        return None
    a, b = to_affine(c.a), to_affine(c.b)
    if a is None or b is None:
        return None
    return {"ge": lambda: a - b, "gt": lambda: a - b - 1, "le": lambda: b - a,
            "lt": lambda: b - a - 1}.get(c.op, lambda: None)()


def _guard_padding(guard, reads, ranges):
    """``(operand, ((low, high), ...))`` when ``guard`` says exactly "this operand's read
    is inside its tensor" (each conjunct ``index >= 0`` or ``index < size`` of one of its
    dimensions, every dimension that leaves the tensor checked on that side): the
    guarded sum then equals the unguarded sum over the operand padded with zeros by
    ``low``/``high`` elements (for a finite other operand: ``0 * inf`` is NaN where the
    guarded sum skips the term). None otherwise."""
    checks = set()
    for c in conjuncts(guard):
        e = _as_nonnegative(c)
        if e is None:
            return None
        found = None
        for which, (read, rng) in enumerate(zip(reads, ranges)):
            for dim, ((aff, _, _), size) in enumerate(zip(rng, read.tensor.shape)):
                if e == aff:
                    found = (which, dim, "low")
                elif e == size - 1 - aff:
                    found = (which, dim, "high")
        if found is None:
            return None
        checks.add(found)
    owners = {which for which, _, _ in checks}
    if len(owners) != 1:
        return None
    which = owners.pop()
    pads = []
    for dim, ((_, lo, hi), size) in enumerate(zip(ranges[which], reads[which].tensor.shape)):
        low, high = max(0, -lo), max(0, hi - (size - 1))
        if (low and (which, dim, "low") not in checks) or \
                (high and (which, dim, "high") not in checks):
            return None
        pads.append((low, high))
    other = ranges[1 - which]
    if any(lo < 0 or hi >= size for (_, lo, hi), size in zip(other, reads[1 - which].tensor.shape)):
        return None
    return which, tuple(pads)


# -- output axes a reduction does not depend on ---------------------------------------


def drop_invariant_axes(tensor):
    """``(stage, kept)``: the compute stage ``tensor`` without the output axes of extent
    above one that its body does not use, and the positions of the axes it keeps; None
    when there is no such axis or no reduction to save.

    The gradient of a convolution for a head of ones is the same for every image (data
    gradient) or every output channel (weight gradient): computed once over the other
    axes, then copied, it costs that axis's extent less. The identity preserved:
    ``tensor[x] == stage[x[kept]]`` for every ``x``.

    >>> import tegrad as tg
    >>> w = tg.placeholder((3, 4), name="w"); k = tg.reduce_axis((0, 3), name="k")
    >>> t = tg.compute((5, 4), lambda i, j: tg.sum(w[k, j], axis=k))
    >>> s, kept = drop_invariant_axes(t); s.shape, kept
    ((4,), (1,))
    """
    op = tensor.op
    if not isinstance(op, ComputeOp) or not any(type(n) is Reduce for n in walk(op.body)):
        return None
    used = free_var_names(op.body)
    kept = tuple(k for k, ax in enumerate(op.axes)
                 if ax.name in used or ax.extent.value == 1)
    if len(kept) == len(op.axes):
        return None
    return compute_stage(f"{tensor.name}_once", [op.axes[k] for k in kept], op.body), kept


def drop_invariant_scatter_axes(tensor):
    """``(stage, kept)``: the scatter stage ``tensor`` without the axes that only run
    along an output dimension of their own, and the positions of the output dimensions
    it keeps; None when there is no such axis.

    An axis ``a`` of the scatter's domain qualifies when every target writes at index
    ``a`` in one dimension ``d`` (the same for all, of the axis's extent), uses ``a``
    nowhere else, and the stage has no ``init``: every line along ``d`` then receives
    the same sums. The gradient of ``take`` for a head of ones adds ``1.0`` along whole
    rows (``dx[idx[i], j] += 1.0``): it counts each row's takes once, then copies the
    count along the row. The identity preserved: ``tensor[x] == stage[x[kept]]``.

    >>> import tegrad as tg
    >>> x = tg.placeholder((5, 3), name="x")
    >>> idx = tg.placeholder((4,), dtype="int64", name="idx")
    >>> dx = tg.differentiate(tg.ops.take(x, idx, axis=0), [x]).result[0]
    >>> s, kept = drop_invariant_scatter_axes(dx); s.shape, kept
    ((5,), (0,))
    """
    op = tensor.op
    if not isinstance(op, ScatterOp) or op.init is not None:
        return None
    dropped = {}  # axis position -> output dimension
    for k, ax in enumerate(op.axes):
        dims = set()
        for target in op.targets:
            at = [d for d, index in enumerate(target.indices)
                  if type(index) is Var and index.name == ax.name]
            others = [e for d, e in enumerate(target.exprs()) if d not in at]
            if len(at) != 1 or any(ax.name in free_var_names(e) for e in others):
                break
            dims.add(at[0])
        else:
            d = dims.pop() if len(dims) == 1 else None
            if d is not None and tensor.shape[d] == ax.extent.value and \
                    type(ax.lo) is Const and ax.lo.value == 0 and d not in dropped.values():
                dropped[k] = d
    if not dropped:
        return None
    lost = set(dropped.values())
    kept = tuple(d for d in range(len(tensor.shape)) if d not in lost)
    targets = [ScatterTarget([target.indices[d] for d in kept], target.value, target.where)
               for target in op.targets]
    axes = [ax for k, ax in enumerate(op.axes) if k not in dropped]
    return scatter_stage(f"{tensor.name}_once", [tensor.shape[d] for d in kept], axes,
                         targets), kept


# -- residue classes of strided output axes --------------------------------------------

#: the most residue classes a stage is split into
MAX_RESIDUE_CLASSES = 16


@dataclass(frozen=True, eq=False)
class ResidueClass:
    """One part of a stage split by output residues: ``stage`` computes the elements of
    the original output at ``axis == step * q + residue`` (``q`` the part's axis, same
    name and position) for each ``(position, step, residue)`` of ``splits``."""

    stage: object
    splits: tuple


def residue_classes(tensor):
    """The compute stage ``tensor`` split into the residue classes of its output axes
    that appear under ``// s`` or ``% s``, or None (no such axis, or too many classes).

    A strided convolution's data gradient reads its output gradient at ``i2 // 2``; at
    ``i2 == 2 * q + p`` that is ``q`` (``(2*q + p) // 2 == q + p // 2`` for a constant
    ``p``), so each class is an affine stage, a contraction of its own. The identity
    preserved: ``part[..., q, ...] == tensor[..., step * q + residue, ...]``.

    >>> import tegrad as tg
    >>> a = tg.placeholder((4,), name="a")
    >>> t = tg.compute((5,), lambda i: a[i // 2] * 2.0, name="t")
    >>> [(str(c.stage.op.body), c.stage.shape) for c in residue_classes(t)]
    [('a[i] * 2.0', (3,)), ('a[i] * 2.0', (2,))]
    """
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return None
    names = {ax.name: k for k, ax in enumerate(op.axes)}
    steps = {}
    for node in walk(op.body):
        if type(node) is not Binary or node.op not in ("floordiv", "floormod") \
                or type(node.b) is not Const or not isinstance(node.b.value, int) \
                or node.b.value < 2:
            continue
        aff = to_affine(node.a)
        if aff is None or not aff.is_linear:
            continue
        for name, coeff in aff.as_dict().items():
            if name in names and coeff % node.b.value:
                steps[name] = math.lcm(steps.get(name, 1), node.b.value)
    if not steps or math.prod(steps.values()) > MAX_RESIDUE_CLASSES:
        return None
    parts = []
    for residues in itertools.product(*(range(s) for s in steps.values())):
        mapping, axes, splits = {}, list(op.axes), []
        for (name, step), residue in zip(steps.items(), residues):
            k = names[name]
            ax = op.axes[k]
            extent = -(-(ax.extent.value - residue) // step)
            if extent < 1:
                break
            mapping[name] = ax.var * step + residue
            axes[k] = IterVar(ax.var, Const(0, ax.lo.dtype), Const(extent, ax.extent.dtype),
                              ax.kind)
            splits.append((k, step, residue))
        else:
            body = _CanonicalIndices()(_ExactDivisions()(substitute(op.body, mapping)))
            label = "_".join(str(r) for r in residues)
            parts.append(ResidueClass(compute_stage(f"{tensor.name}_r{label}", axes, body),
                                      tuple(splits)))
    return parts


def split_axes(tensor):
    """The compute stage ``tensor`` with each output axis ``v`` that appears as ``v // d``
    (``d`` dividing its extent) split in two, ``v == d * v_g + v`` (``v_g`` before
    ``v``, ``v`` now of extent ``d``), or None when there is none. The output's memory
    is the same, read in row-major order (a grouped convolution's output channel ``ff``
    is its group ``ff // (O/G)`` and the channel in it). The identity preserved:
    ``split[..., g, f, ...] == tensor[..., d * g + f, ...]``.

    >>> import tegrad as tg
    >>> a = tg.placeholder((2,), name="a")
    >>> t = tg.compute((6,), lambda i: a[i // 3] * 2.0, name="t")
    >>> s = split_axes(t); str(s.op.body), s.shape
    ('a[i_g] * 2.0', (2, 3))
    """
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return None
    extents = {ax.name: ax.extent.value for ax in op.axes}
    divisors = {}
    for node in walk(op.body):
        if type(node) is Binary and node.op == "floordiv" and type(node.b) is Const \
                and type(node.a) is Var and node.a.name in extents:
            d, extent = node.b.value, extents[node.a.name]
            if isinstance(d, int) and 1 < d < extent and extent % d == 0:
                if divisors.setdefault(node.a.name, d) != d:
                    return None
    if not divisors:
        return None
    taken = {ax.name for ax in op.axes} | free_var_names(op.body)
    axes, mapping, small = [], {}, {}
    for ax in op.axes:
        d = divisors.get(ax.name)
        if d is None:
            axes.append(ax)
            continue
        g_name = ax.name + "_g"
        if g_name in taken:
            return None
        g = Var(g_name, ax.var.dtype)
        axes += [IterVar(g, Const(0, ax.lo.dtype), Const(extents[ax.name] // d,
                                                         ax.extent.dtype), ax.kind),
                 IterVar(ax.var, Const(0, ax.lo.dtype), Const(d, ax.extent.dtype), ax.kind)]
        mapping[ax.name] = g * d + ax.var
        small[ax.name] = d
    body = _ExactDivisions(small)(substitute(op.body, mapping))
    return compute_stage(tensor.name, axes, body)


class _ExactDivisions(IdentityMapper):
    """``(d * e + c) // d`` as ``e + c // d`` and ``(d * e + c) % d`` as ``c % d`` (``d``
    a positive constant dividing every coefficient: floor division's identity); with
    ``small`` (variable name -> ``d`` for variables known to lie in ``[0, d)``), also
    ``(d * e + f) // d`` as ``e`` and ``(d * e + f) % d`` as ``f``."""

    def __init__(self, small=None):
        self.small = small or {}

    def finish(self, e, out):
        if type(out) is not Binary or out.op not in ("floordiv", "floormod") \
                or type(out.b) is not Const or not isinstance(out.b.value, int) \
                or out.b.value < 1:
            return out
        d = out.b.value
        aff = to_affine(out.a)
        if aff is None or not aff.is_linear:
            return out
        rest = [n for n, c in aff.as_dict().items() if c % d]
        if len(rest) == 1 and aff.as_dict()[rest[0]] == 1 and aff.constant == 0 \
                and self.small.get(rest[0]) == d:
            f = rest[0]
            if out.op == "floormod":
                return Var(f, out.dtype)
            aff = aff - solver.Affine.var(f)
        elif rest:
            return out
        if out.op == "floormod":
            return Const(aff.constant % d, out.dtype)
        quotient = solver.Affine.const(aff.constant // d)
        for name, c in aff.as_dict().items():
            quotient = quotient + solver.Affine.var(name) * (c // d)
        return from_affine(quotient, out.dtype)


# -- the matrix-product plan ---------------------------------------------------------


@dataclass(frozen=True, eq=False)
class GemmPlan:
    """A contraction as one :class:`GemmSpec`: call the kernel with ``lhs`` at element
    ``lhs_offset`` and ``rhs`` at ``rhs_offset`` (``swapped``: the contraction's second
    operand is the kernel's ``A``, since the output's stride-1 axis is an ``m`` axis)."""

    spec: GemmSpec
    lhs: object
    rhs: object
    lhs_offset: int
    rhs_offset: int
    swapped: bool
    #: zeros around each dimension of ``lhs``/``rhs`` (empty: none): the kernel reads
    #: a zero-padded copy, at ``lhs_offset``/``rhs_offset`` from its start
    lhs_padding: tuple = ()
    rhs_padding: tuple = ()


def _merge(axes, extents, stride_maps, order_by):
    """``(extent, [stride per map])`` of the axes taken as one row-major axis, or None.

    Axes are ordered by ``order_by``'s strides (descending); axes merge when for every map
    ``stride[outer] == stride[inner] * extent[inner]``.
    """
    if not axes:
        return 1, [0] * len(stride_maps)
    axes = sorted(axes, key=lambda v: -abs(order_by.get(v, 0)))
    for outer, inner in zip(axes, axes[1:]):
        for strides in stride_maps:
            if strides.get(outer, 0) != strides.get(inner, 0) * extents[inner]:
                return None
    extent = 1
    for v in axes:
        extent *= extents[v]
    return extent, [strides.get(axes[-1], 0) for strides in stride_maps]


def _contiguous_run(axes, extents, out):
    """The axes of ``axes`` that, with the last (stride-1) one, make one row-major run of
    the output (``out[outer] == out[inner] * extent[inner]``), outermost first."""
    axes = sorted(axes, key=lambda v: -abs(out.get(v, 0)))
    if not axes or out.get(axes[-1]) != 1:
        return axes[-1:]
    run = [axes[-1]]
    for outer in reversed(axes[:-1]):
        if out[outer] != out[run[0]] * extents[run[0]]:
            break
        run.insert(0, outer)
    return run


#: the most rows an offset table of a plan may have
MAX_TABLE_ROWS = 1 << 16


def _table(axes, extents, stride_maps, order_by):
    """Offset rows ``(sum(i_v * s[v]) for s in stride_maps)`` for every index of ``axes``
    (row-major, axes ordered by ``order_by``'s strides, descending), or None if too many."""
    axes = sorted(axes, key=lambda v: -abs(order_by.get(v, 0)))
    if math.prod(extents[v] for v in axes) > MAX_TABLE_ROWS:
        return None
    rows = np.zeros((1, len(stride_maps)), dtype=np.int64)
    for v in axes:
        steps = np.array([s.get(v, 0) for s in stride_maps], dtype=np.int64)
        rows = (rows[:, None, :] + np.arange(extents[v], dtype=np.int64)[None, :, None]
                * steps).reshape(-1, len(stride_maps))
    return tuple(map(tuple, rows.tolist()))


#: a product of fewer outputs per call than this (a dot product: one) runs as loops,
#: whose vector accumulators read both operands once; the micro-kernel would fill one
#: lane of its register block and pack B sixteen times over (a 524,288-term dot product:
#: 3.2 ms against numpy's 0.1). So does a product of one row per call (a depthwise
#: convolution's channel: each element of B is used once, and the micro-kernel would
#: fill one of its rows after packing B; 8x64x32x32 fwd+grad: 6.3 -> 4.4 ms) or of one
#: column (a global average pool's sum with ones: 32x256x8x8 fwd+grad 0.37 -> 0.29 ms)
MIN_PRODUCT_OUTPUTS = 16

#: a plan over a transposed output is taken when its calls are this many times larger
#: (``m * n``): a narrow column axis (a strided convolution's weight gradient, columns of
#: its window) leaves the kernel's vector registers mostly empty
TRANSPOSE_GAIN = 4

#: a plan whose calls have at least this many columns is kept as it is: its vector
#: registers are full, and a transposed plan would add a copy of the output (a
#: convolution over a batch of 32 images with 10 filters took its 676 output pixels per
#: image as rows and the 32 * 676 as columns, then copied the result back, strided)
WIDE_COLUMNS = 64


def best_gemm_plan(c):
    """``(plan, order)``: :func:`gemm_plan` of ``c``, or of ``c`` with its output seen
    transposed so that the longest ``m`` or ``n`` axis is its stride-1 axis, when that
    makes each call :data:`TRANSPOSE_GAIN` times larger and ``c``'s own plan has fewer
    than :data:`WIDE_COLUMNS` columns (``order``: the output axes'
    positions in the transposed array, row-major, None when not transposed: the plan
    then writes ``out.transpose(order)``). ``(None, None)`` when there is no plan, or
    when its calls have fewer than :data:`MIN_PRODUCT_OUTPUTS` outputs, one row or one
    column.

    >>> import tegrad as tg
    >>> h = tg.placeholder((9, 64, 2), name="h"); x = tg.placeholder((9, 32), name="x")
    >>> k = tg.reduce_axis((0, 9), name="k")
    >>> t = tg.compute((64, 32, 2), lambda f, c, r: tg.sum(h[k, f, r] * x[k, c], axis=k))
    >>> plan, order = best_gemm_plan(detect_contraction(t))
    >>> (plan.spec.batch, plan.spec.m, plan.spec.n), order
    ((1, 32, 128), (1, 2, 0))
    """
    plan, order = _best_gemm_plan(c)
    if plan is None or plan.spec.m * plan.spec.n < MIN_PRODUCT_OUTPUTS or \
            min(plan.spec.m, plan.spec.n) == 1:
        return None, None
    return plan, order


def _best_gemm_plan(c):
    plan = gemm_plan(c)
    if c.epilogue is not None or c.output.dtype != c.dtype or len(c.out_strides) < 2 or (
            plan is not None and plan.spec.n >= WIDE_COLUMNS):
        return plan, None
    names = list(c.out_strides)
    longest = max(c.m_axes + c.n_axes, key=lambda v: c.extents[v], default=None)
    if longest is None or longest == names[-1]:
        return plan, None
    order = tuple(k for k, v in enumerate(names) if v != longest) + (names.index(longest),)
    shape = [c.extents[names[k]] for k in order]
    out = dict(zip((names[k] for k in order), row_major_strides(shape)))
    turned = gemm_plan(Contraction(c.output, c.a, c.b, c.m_axes, c.n_axes, c.batch_axes,
                                   c.k_axes, c.extents, c.lows, out, c.dtype, c.guard,
                                   c.epilogue, c.ones))
    if turned is None:
        return plan, None
    if plan is not None and turned.spec.m * turned.spec.n < \
            TRANSPOSE_GAIN * plan.spec.m * plan.spec.n:
        return plan, None
    return turned, order


def gemm_plan(c):
    """The :class:`GemmPlan` of contraction ``c``, or None when it has a guard, casts, a
    dtype the micro-kernel lacks, or a batch axis as the output's stride-1 axis.

    The output's stride-1 axis is the kernel's column axis ``n`` (the other ``n`` axes
    join it when their strides merge into one, else they become batch axes); the ``m``
    axes merge likewise, or the longest is ``m`` and the others are batch axes. Batch
    and reduction axes that do not merge are given by offset tables.
    """
    if c.guard is not None and not (c.a.padding or c.b.padding):
        return None
    if c.a.has_cast or c.b.has_cast:
        return None
    if c.dtype not in ("float32", "float64") or c.a.tensor.dtype != c.dtype \
            or c.b.tensor.dtype != c.dtype:
        return None
    a, b, m_axes, n_axes = c.a, c.b, c.m_axes, c.n_axes
    out, ext = c.out_strides, c.extents
    innermost = list(out)[-1] if out else None  # the last axis: stride 1, row-major
    swapped = innermost in m_axes
    if swapped:
        a, b, m_axes, n_axes = b, a, n_axes, m_axes
    elif innermost is not None and innermost not in n_axes:
        return None
    batch_axes = list(c.batch_axes)
    # the n axes that are one run of C's columns with its stride-1 axis; the others are
    # batch axes; B reads the run with one stride, or through a column offset table
    n_group = _contiguous_run(n_axes, ext, out)
    batch_axes += [v for v in n_axes if v not in n_group]
    n_merged = _merge(n_group, ext, [b.strides, out], out)
    n_offsets = None
    if n_merged is None:
        rows = _table(n_group, ext, [b.strides], out)
        if rows is None:
            batch_axes += [v for v in n_group if v != innermost]
            n_merged = _merge((innermost,), ext, [b.strides, out], out)
        else:
            n_offsets = tuple(r[0] for r in rows)
            n_merged = (len(rows), [0, 1])
    m_merged = _merge(m_axes, ext, [a.strides, out], out)
    if m_merged is None:
        longest = max(m_axes, key=lambda v: ext[v])
        batch_axes += [v for v in m_axes if v != longest]
        m_merged = _merge((longest,), ext, [a.strides, out], out)
    (n, (bn, cn)), (m, (am, cm)) = n_merged, m_merged
    if n > 1 and cn != 1:
        return None
    maps = [a.strides, b.strides, out]
    batch_merged = _merge(batch_axes, ext, maps, out)
    batch_offsets = None
    if batch_merged is None:
        batch_offsets = _table(batch_axes, ext, maps, out)
        if batch_offsets is None:
            return None
        batch_merged = (len(batch_offsets), [0, 0, 0])
    k_merged = _merge(c.k_axes, ext, [a.strides, b.strides], a.strides)
    k_offsets = None
    if k_merged is None:
        k_offsets = _table(c.k_axes, ext, [a.strides, b.strides], a.strides)
        if k_offsets is None:
            return None
        k_merged = (len(k_offsets), [0, 0])
    (batch, (ap, bp, cp)), (k, (ak, bk)) = batch_merged, k_merged
    spec = GemmSpec(c.dtype, batch, m, n, k, (ap, am, ak), (bp, bk, bn), (cp, cm, 1),
                    k_offsets=k_offsets, batch_offsets=batch_offsets, n_offsets=n_offsets)
    return GemmPlan(spec, a.tensor, b.tensor, a.offset, b.offset, swapped, a.padding,
                    b.padding)
