"""Reductions of tuples: an extremum with its index, a mean with its variance, each
computed in one pass (one loop nest) by a reducer of tuples (see :func:`tegrad.comm_reducer`).

``argmax_with_value(x, axis)`` reduces ``(index, value)`` pairs with PyTorch's rules for
``torch.max(x, dim)``: the first index of the maximum, NaN greater than every number
(the first NaN wins). Its value's gradient flows to that one position (not split among
ties, as ``torch.max(x, dim)`` does); the indices have none.

``mean_var(x, axis)`` reduces ``(count, mean, M2)`` triples with Chan's pairwise update
(Welford's when one side is a single element): ``n = na + nb``, ``d = mb - ma``,
``mean = ma + d * nb / n``, ``M2 = M2a + M2b + d * d * na * nb / n``. It does not
subtract two large sums as ``sum(x * x) - n * mean**2`` does (all digits lost when the
mean is large against the spread), and it reads ``x`` once where the two-pass
``sum((x - mean)**2)`` reads it twice. Its cost is a division per element. The moments
accumulate in float64 (see :data:`ACCUMULATOR`), the results have the input's float
dtype (float64 for integers, as numpy).

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((2, 3), dtype="float64", name="x")
>>> idx, val = argmax_with_value(x, axis=1)
>>> X = np.array([[1.0, 5.0, 5.0], [np.nan, 2.0, np.nan]])
>>> [a.tolist() for a in tg.evaluate([idx, val], {x: X})]
[[1, 0], [5.0, nan]]
>>> mean, var = mean_var(x, axis=1)
>>> tg.evaluate(var, {x: np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]])}).tolist()
[0.6666666666666666, 0.0]
"""
from __future__ import annotations

import functools

from tegrad.ir import dtypes as _dt
from tegrad.ir import reduction as _red
from tegrad.ir.errors import DTypeError, TegradError
from tegrad.ir.expr import Const, binary, cast, compare, select
from tegrad.ir.tensor import compute
from tegrad.ops._common import (check_keepdims, check_tensor, is_integer, normalize_axes, numel,
                                operator, ravel)
from tegrad.ops.reduce import _float_source, reduce_stage

__all__ = ["argmax_with_value", "argmin_with_value", "mean_var"]

#: the dtype of the indices (the dtype of axis variables, as :func:`tegrad.ops.argmax`)
INDEX_DTYPE = _dt.INDEX_DTYPE


def _first_extremum(better):
    """``combine((i, v), (j, w))``: the pair whose value comes first by ``better`` (NaN
    first of all), the smaller index on ties. A total order, so the fold is commutative
    and associative."""
    def combine(a, b):
        a_nan, b_nan = compare("ne", a[1], a[1]), compare("ne", b[1], b[1])
        tie = compare("eq", a[1], b[1]) | (a_nan & b_nan)
        first = better(a[1], b[1]) | (a_nan & ~b_nan) | (tie & compare("lt", a[0], b[0]))
        return select(first, a[0], b[0]), select(first, a[1], b[1])
    return combine


def _extreme(dtype, sign):
    if _dt.is_float(dtype):
        return sign * float("inf")
    return _dt.max_value(dtype) if sign > 0 else _dt.min_value(dtype)


def _at_index(x, y):
    """The value's derivative: 1 at the chosen index, 0 elsewhere; the index has none."""
    hit = select(compare("eq", x[0], y[0]), Const(1, y[1].dtype), Const(0, y[1].dtype))
    return (0, 0), (0, hit)


#: ``(index, value)`` pairs reduced to the first maximum (NaN the largest)
ARGMAX = _red.comm_reducer(_first_extremum(lambda a, b: compare("gt", a, b)),
                           lambda ti, tv: (_dt.max_value(ti), _extreme(tv, -1)),
                           name="argmax", derivative=_at_index)
#: ``(index, value)`` pairs reduced to the first minimum (NaN the smallest)
ARGMIN = _red.comm_reducer(_first_extremum(lambda a, b: compare("lt", a, b)),
                           lambda ti, tv: (_dt.max_value(ti), _extreme(tv, +1)),
                           name="argmin", derivative=_at_index)


def _with_index(x, axis, keepdims, name, reducer):
    check_tensor(x)
    keepdims = check_keepdims(keepdims)
    if axis is not None and not is_integer(axis):
        raise TegradError(f"axis must be None or an integer, got {axis!r}")
    if not (_dt.is_float(x.dtype) or _dt.is_int(x.dtype)):
        raise DTypeError(f"tensor {x.name!r} has dtype {x.dtype}; cast it to a number dtype")
    axes = normalize_axes(axis, x)

    def body(read, raxes):
        if not raxes:
            return Const(0, INDEX_DTYPE), x[read]
        position = ravel([read[d] for d in axes], [x.shape[d] for d in axes])
        return reducer((cast(position, INDEX_DTYPE), x[read]), axis=raxes)

    return reduce_stage(x, axes, keepdims, (f"{name}_index", f"{name}_value"), body)


@operator
def argmax_with_value(x, axis=None, keepdims=False):
    """``(indices, values)`` of the maxima along ``axis``, in one pass (int32 indices).

    The first index of the maximum, NaN counting as the largest (``torch.max(x, dim)``);
    with ``axis`` None the row-major flat index over all of ``x``. The values'
    gradient goes to the position of the index.

    >>> import tegrad as tg
    >>> x = tg.placeholder((4, 6), name="x")
    >>> [t.name for t in argmax_with_value(x, axis=-1)]
    ['argmax_index', 'argmax_value']
    """
    return _with_index(x, axis, keepdims, "argmax", ARGMAX)


@operator
def argmin_with_value(x, axis=None, keepdims=False):
    """``(indices, values)`` of the minima along ``axis``, in one pass: as
    :func:`argmax_with_value` (NaN counting as the smallest, as ``torch.min(x, dim)``).

    >>> import tegrad as tg
    >>> x = tg.placeholder((4, 6), name="x")
    >>> [t.shape for t in argmin_with_value(x, axis=0, keepdims=True)]
    [(1, 6), (1, 6)]
    """
    return _with_index(x, axis, keepdims, "argmin", ARGMIN)


def _chan(a, b):
    """The ``(count, mean, M2)`` of two parts together (Chan et al., 1979)."""
    dtype = a[1].dtype
    n = binary("add", a[0], b[0])
    nb = cast(b[0], dtype) / cast(binary("max", n, Const(1, n.dtype)), dtype)  # nb / n
    d = b[1] - a[1]
    return n, a[1] + d * nb, a[2] + b[2] + d * d * cast(a[0], dtype) * nb


@functools.lru_cache(maxsize=None)
def moments(n):
    """The reducer of ``(count, mean, M2)`` triples, each element ``(1, x, 0)`` (see the
    module doc), for reductions over ``n`` points: its derivative, ``dmean/dx = 1/n``
    and ``dM2/dx = 2 (x - mean)``, then needs no count. One reducer per ``n``, so stages
    built alike compare equal."""
    def derivative(x, y):
        dtype = y[1].dtype
        return ((0, 0, 0), (0, Const(1 / n, dtype), 0),
                (0, Const(2, dtype) * (x[1] - y[1]), 0))

    return _red.comm_reducer(_chan, lambda tn, tm, t2: (0, 0.0, 0.0), name="moments",
                             derivative=derivative)

#: the dtype of the element count (exact for any tensor size)
COUNT_DTYPE = "int64"
#: the dtype the moments accumulate in, whatever the input's (as PyTorch's var_mean on
#: CPU): a float32 fold of 4096 values 1e4 +- 0.1 loses the variance to a relative error
#: of 5e-3 (measured), a float64 one to 2e-8, the error of the float32 result
ACCUMULATOR = "float64"


@operator
def mean_var(x, axis=None, keepdims=False, correction=0):
    """``(mean, variance)`` along ``axis`` in one pass over ``x`` (see the module doc).

    The variance divides by ``n - correction`` (``torch.var_mean``'s ``correction``; 0,
    the default, is numpy's population variance). Integer tensors give float64, as
    numpy. Both outputs are differentiable.

    >>> import tegrad as tg
    >>> x = tg.placeholder((8, 3), name="x")
    >>> [t.shape for t in mean_var(x, axis=0)]
    [(3,), (3,)]
    """
    check_tensor(x)
    axes = normalize_axes(axis, x)
    keepdims = check_keepdims(keepdims)
    if isinstance(correction, bool) or not is_integer(correction) or correction < 0:
        raise TegradError(f"correction must be a non-negative integer, got {correction!r}")
    dtype, _ = _float_source(x)
    n = numel(x.shape[d] for d in axes)
    if n - correction <= 0:
        raise TegradError(f"the variance of tensor {x.name!r} over {n} element(s) with "
                          f"correction {correction} divides by zero")

    def body(read, raxes):
        element = cast(x[read], ACCUMULATOR)
        if not raxes:
            return Const(1, COUNT_DTYPE), element, Const(0, ACCUMULATOR)
        return moments(n)((Const(1, COUNT_DTYPE), element, Const(0, ACCUMULATOR)), axis=raxes)

    wide = "mean_var_mean" if dtype == ACCUMULATOR else "mean_var_mean64"
    _, mean, m2 = reduce_stage(x, axes, keepdims, ("mean_var_count", wide, "mean_var_m2"),
                               body)
    divisor = Const(n - correction, ACCUMULATOR)
    var = compute(m2.shape, lambda *i: cast(m2[i] / divisor, dtype), name="mean_var_var")
    if dtype != ACCUMULATOR:
        moments_mean = mean
        mean = compute(mean.shape, lambda *i: cast(moments_mean[i], dtype), name="mean_var_mean")
    return mean, var
