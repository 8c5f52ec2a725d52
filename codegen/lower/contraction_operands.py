"""The records of a contraction and its operands read off a product's two reads.

:class:`Contraction` is what :func:`~tegrad.codegen.lower.product_plans.detect_contraction`
finds: the two :class:`Operand` (a tensor read at ``offset + sum(strides[v] * v)``), each
axis's role and range, the guard and epilogue. This module builds the operands: the
factors of a product of two reads under float casts (:func:`product_factors`), the range
of each affine index over the stage's domain (:func:`index_ranges`), or of a read's
row-major offset when its indices are not affine (:func:`flat_range`), a guard that only
says an operand is inside its tensor as that operand's zero padding
(:func:`guard_padding`), and the :class:`Operand` of a read (:func:`read_operand`).

>>> import tegrad as tg
>>> a = tg.placeholder((8, 3), name="a"); b = tg.placeholder((3, 5), name="b")
>>> _, (rb, _) = product_factors(tg.ops.matmul(a, b).op.body.source)
>>> lows = {"ax0": 0, "ax1": 0, "rk": 0}
>>> ranges = index_ranges(rb, {"ax0": 8, "ax1": 5, "rk": 3}, lows)
>>> read_operand(rb, "float32", ranges, lows, None, guarded=False).strides
{'rk': 5, 'ax1': 1}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tegrad import solver
from tegrad.analysis.affine import conjuncts, to_affine
from tegrad.analysis.intervals import indices_inside
from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Binary, Cast, Compare, Read


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
    #: the tensor of ones that is one operand (see
    #: :func:`~tegrad.codegen.lower.reduction_bounds.times_ones`), or None
    ones: Optional[object] = None

    @property
    def flops(self):
        n = 2
        for ext in self.extents.values():
            n *= ext
        return n


def strip_casts(e):
    """``(inner, dtype)``: ``e`` without float-to-float casts, and ``e``'s dtype."""
    dtype = e.dtype
    while type(e) is Cast and _dt.is_float(e.a.dtype):
        e = e.a
    return e, dtype


def product_factors(source):
    """``[(read, dtype), (read, dtype)]`` when ``source`` multiplies two reads."""
    e, _ = strip_casts(source)
    if type(e) is not Binary or e.op != "mul":
        return None
    out = []
    for factor in (e.a, e.b):
        inner, dtype = strip_casts(factor)
        if type(inner) is not Read:
            return None
        out.append((inner, dtype))
    return out


def index_ranges(read, extents, lows):
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


def flat_range(read, extents, lows):
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


def read_operand(read, dtype, ranges, lows, padding, *, guarded, flat=False):
    """The :class:`Operand` of ``read`` (over its zero-padded array when ``padding``);
    None if an index can leave the (padded) array, unless ``guarded``. ``flat``:
    ``ranges`` is the one range of :func:`flat_range`."""
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


def guard_padding(guard, reads, ranges):
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
