"""Slices (strided_slice, slice_like, split) and padding.

Every slice is the affine read ``out[i...] = x[begin + i * stride ...]``, with begin
and stride constants per dimension; padding reads ``x`` through selects on the bounds.

>>> import tegrad as tg
>>> x = tg.placeholder((5, 4), name="x")
>>> print(tg.format(strided_slice(x, [4], [0], [-2])).splitlines()[-1])
strided_slice[ax0, ax1] = x[4 - ax0 * 2, ax1]
"""
from __future__ import annotations

from tegrad.ir import builders as api
from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.expr import Const, select
from tegrad.ir.tensor import Tensor, compute
from tegrad.ops._common import (check_int, check_tensor, int_list, is_integer, is_number,
                                normalize_axes, tensor_axis, operator)

__all__ = ["strided_slice", "slice_like", "split", "pad"]


def _affine(i, begin, stride):
    """``begin + i * stride`` with the trivial terms left out."""
    if stride == 1:
        return i if begin == 0 else i + begin
    if stride == -1:
        return begin - i
    if stride < 0:
        return begin - i * (-stride)
    return i * stride if begin == 0 else i * stride + begin


def sliced(x, begins, strides, shape, name):
    """The stage ``out[i...] = x[begins[d] + i_d * strides[d] ...]`` of ``shape``."""
    return compute(shape, lambda *i: x[tuple(_affine(i[d], begins[d], strides[d])
                                               for d in range(x.ndim))], name=name)


def _entries(values, what, ndim, allow_none):
    if values is None:
        return [None] * ndim
    if is_integer(values):
        values = [values]
    if not isinstance(values, (tuple, list)):
        raise TegradError(f"{what} must be a sequence of integers, got {values!r}")
    if len(values) > ndim:
        raise ShapeError(f"{what} {tuple(values)} has {len(values)} entries for a tensor of "
                         f"{ndim} dimension(s)")
    out = [v if (v is None and allow_none) else check_int(v, f"{what} entry") for v in values]
    return out + [None] * (ndim - len(out))


@operator
def strided_slice(x, begin, end, strides=None):
    """``x[begin[0]:end[0]:strides[0], ...]`` with Python/numpy slicing semantics.

    Per dimension ``d``: ``out[i] = x[b + i * s]`` for ``i < len(range(b, e, s))``,
    where ``b, e`` are ``begin[d], end[d]`` normalised like Python slices: negative
    values count from the end, out-of-range values are clamped, and a missing or None
    entry means the whole extent in the direction of the stride. ``strides`` defaults
    to 1; a negative stride walks backwards. ``begin``, ``end`` and ``strides`` may be
    shorter than ``x.ndim`` (the remaining dimensions are kept whole). An empty slice
    is an error, since tensors cannot be empty.
    """
    check_tensor(x)
    begin = _entries(begin, "begin", x.ndim, True)
    end = _entries(end, "end", x.ndim, True)
    steps = _entries(strides, "strides", x.ndim, True)
    begins, stride_list, shape = [], [], []
    for d, extent in enumerate(x.shape):
        step = 1 if steps[d] is None else steps[d]
        if step == 0:
            raise TegradError(f"strides entry {d} is 0; strides must be non-zero")
        r = range(*slice(begin[d], end[d], step).indices(extent))
        if len(r) == 0:
            raise ShapeError(f"the slice {begin[d]}:{end[d]}:{step} of dimension {d} of tensor "
                             f"{x.name!r} of shape {x.shape} is empty")
        begins.append(r.start)
        stride_list.append(step)
        shape.append(len(r))
    return sliced(x, begins, stride_list, tuple(shape), "strided_slice")


@operator
def slice_like(x, shape_like, axes=None):
    """``x[:s_0, :s_1, ...]``: the leading corner of ``x`` of the shape of ``shape_like``.

    ``shape_like`` is a tensor (only its shape is used) or a shape. With ``axes`` None
    every dimension that both have is cut to ``shape_like``'s extent (Relay's rule);
    otherwise only the listed axes, which must exist in both. Extents may only shrink.
    """
    check_tensor(x)
    target = shape_like.shape if isinstance(shape_like, Tensor) else tuple(
        int_list(shape_like, "shape_like"))
    if axes is None:
        cut = range(min(x.ndim, len(target)))
    else:
        cut = normalize_axes(axes, x, what="axes")
        for d in cut:
            if d >= len(target):
                raise ShapeError(f"axis {d} of tensor {x.name!r} has no counterpart in "
                                 f"shape_like {target}")
    shape = list(x.shape)
    for d in cut:
        if not 0 < target[d] <= x.shape[d]:
            raise ShapeError(f"dimension {d} of tensor {x.name!r} of shape {x.shape} cannot "
                             f"be sliced to extent {target[d]} of shape_like {target}")
        shape[d] = target[d]
    return sliced(x, [0] * x.ndim, [1] * x.ndim, tuple(shape), "slice_like")


@operator
def split(x, indices_or_sections, axis=0):
    """Split ``x`` along ``axis`` into a list of tensors, like ``numpy.split``.

    An int ``n`` gives ``n`` equal pieces (the extent must be divisible by ``n``); a
    sequence of indices ``[a, b, ...]`` gives ``x[:a], x[a:b], ..., x[last:]`` along
    ``axis``. Pieces cannot be empty, so indices must increase strictly inside
    ``(0, extent)``.
    """
    check_tensor(x)
    axis = tensor_axis(axis, x)
    extent = x.shape[axis]
    if is_integer(indices_or_sections):
        n = check_int(indices_or_sections, "indices_or_sections", minimum=1)
        if extent % n:
            raise ShapeError(f"dimension {axis} of tensor {x.name!r} of shape {x.shape} "
                             f"(extent {extent}) cannot be split into {n} equal sections")
        cuts = [extent // n * k for k in range(1, n)]
    else:
        cuts = int_list(indices_or_sections, "indices_or_sections")
        if any(not 0 < c < extent for c in cuts) or any(a >= b for a, b in zip(cuts, cuts[1:])):
            raise ShapeError(f"indices_or_sections {tuple(cuts)} must increase strictly inside "
                             f"(0, {extent}), the extent of dimension {axis} of tensor "
                             f"{x.name!r}, as pieces cannot be empty")
    bounds = [0] + cuts + [extent]
    pieces = []
    for lo, hi in zip(bounds, bounds[1:]):
        begins = [lo if d == axis else 0 for d in range(x.ndim)]
        shape = x.shape[:axis] + (hi - lo,) + x.shape[axis + 1:]
        pieces.append(sliced(x, begins, [1] * x.ndim, shape, "split"))
    return pieces


def _pad_pairs(pad_width, ndim):
    """numpy's forms: n, (before, after), ((before, after),) or one pair per axis."""
    if is_integer(pad_width):
        pairs = [(pad_width, pad_width)] * ndim
    elif (isinstance(pad_width, (tuple, list)) and len(pad_width) == 2
          and all(is_integer(v) for v in pad_width)):
        pairs = [tuple(pad_width)] * ndim
    elif isinstance(pad_width, (tuple, list)) and all(
            isinstance(p, (tuple, list)) and len(p) == 2 for p in pad_width):
        pairs = list(pad_width) * ndim if len(pad_width) == 1 else list(pad_width)
        if len(pairs) != ndim:
            raise ShapeError(f"pad_width has {len(pad_width)} pairs for a tensor of {ndim} "
                             f"dimension(s)")
    else:
        raise TegradError(f"pad_width must be an int, a (before, after) pair or one pair "
                          f"per dimension, got {pad_width!r}")
    return [(check_int(b, "pad_width entry", minimum=0), check_int(a, "pad_width entry",
                                                                  minimum=0)) for b, a in pairs]


def _edge_index(i, before, after, extent):
    """Index of ``x`` read by an edge-padded output index ``i``: ``clamp(j, 0, n - 1)``."""
    if extent == 1:
        return 0
    j = i - before if before else i
    out = select(j > extent - 1, extent - 1, j) if after else j
    return select(i < before, 0, out) if before else out


def _reflect_index(i, before, after, extent):
    """Index of ``x`` read by a reflect-padded output index ``i`` (no edge repeat)."""
    if extent == 1:
        return 0
    j = i - before if before else i
    last = extent - 1
    if before <= last and after <= last:  # one reflection at most: plain selects
        out = select(j > last, 2 * last - j, j) if after else j
        return select(j < 0, before - i, out) if before else out
    period = 2 * last  # repeated reflection is periodic: fold into one period
    folded = j % period
    return select(folded > last, period - folded, folded)


def _constant_padded(x, index, pairs, value):
    """``all(before <= i < before + n) ? x[i - before ...] : value``."""
    inside, read = [], []
    for i, (before, after), extent in zip(index, pairs, x.shape):
        read.append(i - before if before else i)
        if before:
            inside.append(i >= before)
        if after:
            inside.append(i < before + extent)
    if not inside:
        return x[tuple(read)]
    return select(api.all(*inside), x[tuple(read)], value)


_MODES = ("constant", "edge", "reflect")


@operator
def pad(x, pad_width, mode="constant", value=0):
    """Pad ``x`` like ``numpy.pad``; ``out`` has extent ``before + n + after`` per axis.

    ``pad_width`` is an int, a ``(before, after)`` pair for every axis, or one pair per
    axis. With ``j = i - before`` the output index shifted back into ``x``:

    - ``"constant"``: ``out[i] = 0 <= j < n ? x[j] : value`` (``value`` in x's dtype);
      pads may be wider than ``x``.
    - ``"edge"``: ``x[clamp(j, 0, n - 1)]``, as selects.
    - ``"reflect"``: the mirror image without repeating the edge,
      ``x[j < 0 ? -j : j > n - 1 ? 2(n - 1) - j : j]``; pads wider than ``n - 1``
      reflect again (numpy's behaviour, periodic with period ``2(n - 1)``), and an axis
      of extent 1 repeats its element.

    ``value`` is used by the constant mode only.
    """
    check_tensor(x)
    pairs = _pad_pairs(pad_width, x.ndim)
    if mode not in _MODES:
        raise TegradError(f"mode {mode!r} is not one of {', '.join(_MODES)}")
    if not is_number(value):
        raise TegradError(f"value must be a number, got {value!r}")
    shape = tuple(b + n + a for (b, a), n in zip(pairs, x.shape))

    if mode == "constant":
        def fcompute(*index):
            return _constant_padded(x, index, pairs, Const(value, x.dtype))
    else:
        index_of = _edge_index if mode == "edge" else _reflect_index

        def fcompute(*index):
            return x[tuple(index_of(i, b, a, n) for i, (b, a), n in zip(index, pairs, x.shape))]

    return compute(shape, fcompute, name="pad")
