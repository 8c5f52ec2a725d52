"""Reductions over axes of a tensor: sum, max, min, prod, mean, variance, argmax, argmin.

``axis`` is None (every axis), an int or a tuple of ints (negative ones count from the
end); ``keepdims=True`` keeps the reduced axes with extent 1. Each reduction is one
stage whose body is a single top-level reduction over fresh reduce axes ``r0, r1...``
(``variance``, ``argmax`` and ``argmin`` add a first stage for the mean or extremum).

>>> import tegrad as tg
>>> x = tg.placeholder((2, 3, 4), name="x")
>>> print(tg.format(sum(x, axis=(0, -1))).splitlines()[-1])
sum[ax0] = sum(x[r0, ax0, r1], r0 in [0, 2), r1 in [0, 4))
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir import reduction as _red
from tegrad.ir.errors import DTypeError, TegradError
from tegrad.ir.builders import stop_gradient
from tegrad.ir.expr import Const, cast as _cast_expr, compare
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.tensor import compute
from tegrad.ops._common import check_keepdims, check_tensor, is_integer, normalize_axes, numel, operator, ravel

__all__ = ["sum", "max", "min", "prod", "mean", "variance", "argmax", "argmin"]


def reduce_stage(x, axes, keepdims, name, body):
    """The stage reducing ``x`` over the dimensions ``axes`` (sorted positions).

    ``body(read, raxes)`` builds the element from ``read`` (the index of ``x`` for the
    current output element, with the reduce axes in the reduced dimensions) and the
    reduce axes (empty when there is nothing to reduce).
    """
    kept = [d for d in range(x.ndim) if d not in axes]
    shape = tuple(1 if d in axes else x.shape[d] for d in range(x.ndim) if keepdims or d in kept)

    def fcompute(*index):
        raxes = {d: reduce_axis((0, x.shape[d]), name=f"r{n}") for n, d in enumerate(axes)}
        outer = iter(index[d] for d in kept) if keepdims else iter(index)
        read = tuple(raxes[d] if d in raxes else next(outer) for d in range(x.ndim))
        return body(read, [raxes[d] for d in axes])

    return compute(shape, fcompute, name=name)


def _reduce_with(reducer, x, axes, keepdims, name, scale=None):
    """``reducer(scale(x[...]))`` over the positions ``axes`` (a copy for no axes)."""

    def body(read, raxes):
        element = x[read] if scale is None else scale(x[read])
        return reducer(element, axis=raxes) if raxes else element

    return reduce_stage(x, axes, keepdims, name, body)


def _plain_reduction(reducer, x, axis, keepdims, name):
    check_tensor(x)
    return _reduce_with(reducer, x, normalize_axes(axis, x), check_keepdims(keepdims), name)


@operator
def sum(x, axis=None, keepdims=False):
    """``out[kept] = sum(x[...], over the axes in axis)``; the sum over no axes is a copy."""
    return _plain_reduction(_red.sum, x, axis, keepdims, "sum")


@operator
def max(x, axis=None, keepdims=False):
    """``out[kept] = max(x[...], over the axes in axis)``; NaN propagates, as in numpy."""
    return _plain_reduction(_red.max, x, axis, keepdims, "max")


@operator
def min(x, axis=None, keepdims=False):
    """``out[kept] = min(x[...], over the axes in axis)``; NaN propagates, as in numpy."""
    return _plain_reduction(_red.min, x, axis, keepdims, "min")


@operator
def prod(x, axis=None, keepdims=False):
    """``out[kept] = prod(x[...], over the axes in axis)``."""
    return _plain_reduction(_red.prod, x, axis, keepdims, "prod")


def _float_source(x):
    """``x`` itself for floats; integers are read as float64, like numpy's mean."""
    if _dt.is_float(x.dtype):
        return x.dtype, (lambda e: e)
    if _dt.is_int(x.dtype):
        return "float64", (lambda e: _cast_expr(e, "float64"))
    raise DTypeError(f"tensor {x.name!r} has dtype {x.dtype}; a number dtype is needed")


def _count(x, axes):
    return numel(x.shape[d] for d in axes)


def _mean_stage(x, axes, keepdims, name):
    dtype, to_float = _float_source(x)
    n = _count(x, axes)
    return _reduce_with(_red.sum, x, axes, keepdims, name,
                        scale=lambda e: to_float(e) / Const(n, dtype))


@operator
def mean(x, axis=None, keepdims=False):
    """``out[kept] = sum(x[...] / n)`` with ``n`` the number of reduced elements.

    Integer tensors give float64 means (numpy's rule). The division is inside the sum
    so that the stage stays one top-level reduction.
    """
    check_tensor(x)
    return _mean_stage(x, normalize_axes(axis, x), check_keepdims(keepdims), "mean")


@operator
def variance(x, axis=None, keepdims=False, unbiased=False):
    """``out[kept] = sum((x[...] - m)**2 / (n - ddof))``, by default the population variance.

    ``m`` is the mean over the same axes (a first stage ``variance_mean`` with kept
    dimensions, as in Relay), ``n`` the number of reduced elements and ``ddof`` 1 when
    ``unbiased`` else 0 (numpy's ``var`` default). Integer tensors give float64, like
    numpy.

    It is computed as ``(sum((x - c)**2) - n * (m - c)**2) / (n - ddof)`` with
    ``c = stop_gradient(m)``: the same value (the second term is exactly 0), and, since
    the identity holds for every constant ``c``, the same derivatives of every order,
    but the gradient does not flow back through the mean inside the sum (it cancels).
    """
    check_tensor(x)
    axes = normalize_axes(axis, x)
    keepdims = check_keepdims(keepdims)
    if not isinstance(unbiased, bool):
        raise TegradError(f"unbiased must be True or False, got {unbiased!r}")
    dtype, to_float = _float_source(x)
    n = _count(x, axes) - (1 if unbiased else 0)
    if n <= 0:
        raise TegradError(f"the unbiased variance of tensor {x.name!r} over one element "
                          f"divides by zero")
    m = _mean_stage(x, axes, True, "variance_mean")

    def body(read, raxes):
        at_mean = tuple(0 if d in axes else i for d, i in enumerate(read))
        centre = stop_gradient(m[at_mean])
        dev = to_float(x[read]) - centre
        element = dev * dev / Const(n, dtype)
        total = _red.sum(element, axis=raxes) if raxes else element
        shift = m[at_mean] - centre
        return total - shift * shift * Const(_count(x, axes) / n, dtype)

    return reduce_stage(x, axes, keepdims, "variance", body)


def _arg_extremum(x, axis, keepdims, name, reducer):
    """Two stages: the extremum ``m``, then the first flat or axis index where x == m."""
    check_tensor(x)
    keepdims = check_keepdims(keepdims)
    if axis is not None and not is_integer(axis):
        raise TegradError(f"axis must be None or an integer, got {axis!r}")
    axes = normalize_axes(axis, x)
    if _dt.is_bool(x.dtype):
        raise DTypeError(f"tensor {x.name!r} has dtype bool; cast it to a number dtype")
    extreme = _reduce_with(reducer, x, axes, True, f"{name}_{reducer.name}")

    def body(read, raxes):
        if not raxes:
            return Const(0, "int32")
        at_extreme = tuple(0 if d in axes else i for d, i in enumerate(read))
        element = x[read]
        hit = compare("eq", element, extreme[at_extreme])
        if _dt.is_float(x.dtype):  # NaN is the extremum: the first NaN wins, as in numpy
            hit = hit | compare("ne", element, element)
        position = ravel([read[d] for d in axes], [x.shape[d] for d in axes])
        return _red.min(_cast_expr(position, "int32"), axis=raxes, where=hit)

    return reduce_stage(x, axes, keepdims, name, body)


@operator
def argmax(x, axis=None, keepdims=False):
    """The index of the largest element along ``axis`` (int32), the first one on ties.

    ``m = max(x, axis, keepdims=True)``; ``out[kept] = min(i, over i where x[..i..] ==
    m)``. With ``axis`` None, ``i`` is the row-major flat index over all of ``x``
    (numpy's rule). ``axis`` is None or one int; NaN counts as the maximum.
    """
    return _arg_extremum(x, axis, keepdims, "argmax", _red.max)


@operator
def argmin(x, axis=None, keepdims=False):
    """The index of the smallest element along ``axis`` (int32), the first one on ties.

    Like :func:`argmax` with ``min``: ``out[kept] = min(i, over i where x[..i..] ==
    min(x))``; NaN counts as the minimum.
    """
    return _arg_extremum(x, axis, keepdims, "argmin", _red.min)
