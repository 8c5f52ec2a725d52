"""Detection of contractions from a stage's access pattern, and their matrix-product plan.

A stage is a *contraction* when its body is (up to an epilogue of the output's axes, see
below) a ``sum`` reduction, over rectangular axes, of a product of two reads, possibly
under casts, whose indices are affine (no ``//`` or ``%``) in the stage's axes. Each axis
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

from dataclasses import dataclass
from typing import Optional

from tegrad.analysis.affine import conjuncts, to_affine
from tegrad.ir import dtypes as _dt
from tegrad.ir import reduction as _red
from tegrad.ir.expr import Binary, Cast, Compare, Const, Read, Reduce, Var
from tegrad.ir.mapper import IdentityMapper, free_var_names, walk
from tegrad.ir.tensor import ComputeOp

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
    for ax in reduce_.axes:
        if type(ax.lo) is not Const or type(ax.extent) is not Const or ax.extent.value < 1:
            return None
        extents[ax.name], lows[ax.name] = ax.extent.value, ax.lo.value
    factors = _product_factors(reduce_.source)
    if factors is None:
        return None
    guard = reduce_.where
    if type(guard) is Const and guard.value is True:
        guard = None
    ranges = [_index_ranges(read, extents, lows) for read, _ in factors]
    if None in ranges:
        return None
    paddings = [None, None]
    if guard is not None:
        found = _guard_padding(guard, [read for read, _ in factors], ranges)
        if found is not None:
            which, pads = found
            paddings[which] = pads
    operands = []
    for (read, dtype), rng, pads in zip(factors, ranges, paddings):
        # Under a guard (conv2d's padding) a read may leave its tensor where it fails.
        operand = _operand(read, dtype, rng, lows, pads, guarded=guard is not None)
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
        if a.strides.get(ax.name, 0) == 0 or b.strides.get(ax.name, 0) == 0:
            return None
        roles["k"].append(ax.name)
    out_strides = dict(zip(data, row_major_strides(tensor.shape)))
    return Contraction(tensor, a, b, tuple(roles["m"]), tuple(roles["n"]),
                       tuple(roles["batch"]), tuple(roles["k"]), extents, lows, out_strides,
                       reduce_.dtype, guard, epilogue)


class _ReplaceReduce(IdentityMapper):
    def __init__(self, target, var):
        self.target, self.var = target, var

    def map_reduce(self, e, *args):
        return self.var if e is self.target else e


def _split_epilogue(body, data_axes):
    """``(reduce, epilogue)``: the body's one reduction and the body around it (None when
    the body is the reduction), or ``(None, None)``."""
    if type(body) is Reduce:
        return body, None
    reductions = [node for node in walk(body) if type(node) is Reduce]
    if len(reductions) != 1:
        return None, None
    target = reductions[0]
    epilogue = _ReplaceReduce(target, Var(ACC, target.dtype))(body)
    if not free_var_names(epilogue) <= set(data_axes) | {ACC}:
        return None, None
    return target, epilogue


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
        aff = to_affine(index)
        if aff is None or not aff.is_linear or not set(aff.as_dict()) <= set(extents):
            return None
        lo = hi = aff.constant
        for name, coeff in aff.as_dict().items():
            first, last = lows[name], lows[name] + extents[name] - 1
            lo += min(coeff * first, coeff * last)
            hi += max(coeff * first, coeff * last)
        out.append((aff, lo, hi))
    return out


def _operand(read, dtype, ranges, lows, padding, *, guarded):
    """The :class:`Operand` of ``read`` (over its zero-padded array when ``padding``);
    None if an index can leave the (padded) array, unless ``guarded``."""
    tensor = read.tensor
    padding = tuple(padding) if padding else ()
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(tensor.shape, padding)) if padding \
        else tensor.shape
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


#: the most rows an offset table of a plan may have
MAX_TABLE_ROWS = 1 << 16


def _table(axes, extents, stride_maps, order_by):
    """Offset rows ``(sum(i_v * s[v]) for s in stride_maps)`` for every index of ``axes``
    (row-major, axes ordered by ``order_by``'s strides, descending), or None if too many."""
    axes = sorted(axes, key=lambda v: -abs(order_by.get(v, 0)))
    rows = [tuple(0 for _ in stride_maps)]
    for v in axes:
        if len(rows) * extents[v] > MAX_TABLE_ROWS:
            return None
        rows = [tuple(r + i * s.get(v, 0) for r, s in zip(row, stride_maps))
                for row in rows for i in range(extents[v])]
    return tuple(rows)


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
    n_merged = _merge(n_axes, ext, [b.strides, out], out)
    if n_merged is None:
        batch_axes += [v for v in n_axes if v != innermost]
        n_merged = _merge((innermost,), ext, [b.strides, out], out)
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
                    k_offsets=k_offsets, batch_offsets=batch_offsets)
    return GemmPlan(spec, a.tensor, b.tensor, a.offset, b.offset, swapped, a.padding,
                    b.padding)
