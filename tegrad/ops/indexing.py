"""Data-dependent indexing: ``take`` (gather along an axis) and ``one_hot``.

>>> import tegrad as tg
>>> x = tg.placeholder((5, 3), name="x")
>>> idx = tg.placeholder((2,), dtype="int32", name="idx")
>>> print(tg.format(take(x, idx, axis=0, mode="wrap")).splitlines()[-1])
take[ax0, ax1] = x[idx[ax0] % 5, ax1]
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError, TegradError
from tegrad.ir.expr import Const, binary, select
from tegrad.ir.tensor import compute
from tegrad.ops._common import (check_int, check_tensor, is_number, tensor_axis, numel,
                                operator, unravel)

__all__ = ["take", "one_hot"]

_TAKE_MODES = ("clip", "wrap", "fast")


def _check_indices(indices):
    check_tensor(indices, "indices")
    if not _dt.is_int(indices.dtype):
        raise DTypeError(f"indices tensor {indices.name!r} has dtype {indices.dtype}; "
                         f"indices must be integers")
    return indices


def _fix_index(i, extent, mode):
    """The index read for the given index ``i`` along an axis of ``extent``."""
    if mode == "clip":
        return binary("min", binary("max", i, 0), extent - 1)
    if mode == "wrap":
        return i % extent
    return i


@operator
def take(x, indices, axis=None, mode="clip"):
    """Gather elements of ``x`` at ``indices`` along ``axis`` (``numpy.take``).

    ``out[a..., i..., b...] = x[a..., fix(indices[i...]), b...]``, of shape
    ``x.shape[:axis] + indices.shape + x.shape[axis + 1:]``. With ``axis`` None, ``x``
    is read as its row-major flattening: ``out[i...] = x.flat[fix(indices[i...])]``.
    ``fix`` is the ``mode``: ``"clip"`` clamps to ``[0, n - 1]`` (so negative indices
    give 0, like numpy's clip mode and Relay's default), ``"wrap"`` takes ``indices % n``
    (floor modulo, so -1 is the last element), and ``"fast"`` reads as given, without a
    check (an index out of range is an error at evaluation).
    """
    check_tensor(x)
    _check_indices(indices)
    if mode not in _TAKE_MODES:
        raise TegradError(f"mode {mode!r} is not one of {', '.join(_TAKE_MODES)}")
    if axis is None:
        extent = numel(x.shape)
        lead, tail = (), ()
    else:
        axis = tensor_axis(axis, x)
        extent = x.shape[axis]
        lead, tail = x.shape[:axis], x.shape[axis + 1:]
    shape = lead + indices.shape + tail
    k = indices.ndim

    def fcompute(*index):
        at = _fix_index(indices[index[len(lead):len(lead) + k]], extent, mode)
        if axis is None:
            return x[unravel(at, x.shape)]
        return x[index[:len(lead)] + (at,) + index[len(lead) + k:]]

    return compute(shape, fcompute, name="take")


@operator
def one_hot(indices, depth, axis=-1, on_value=1.0, off_value=0.0, dtype="float32"):
    """One-hot encoding: ``out[..., d, ...] = indices[...] == d ? on_value : off_value``.

    The output has ``indices``' shape with a new dimension of extent ``depth`` inserted
    at ``axis`` (in ``[-ndim - 1, ndim]``; -1 appends it). Indices outside
    ``[0, depth)``, negative ones included, give a row of ``off_value`` (as in Relay and
    TensorFlow). ``on_value`` and ``off_value`` are numbers of ``dtype``.
    """
    _check_indices(indices)
    depth = check_int(depth, "depth", minimum=1)
    axis = tensor_axis(axis, indices, extra=1)
    dtype = _dt.canonical_dtype(dtype)
    values = []
    for what, v in (("on_value", on_value), ("off_value", off_value)):
        if not is_number(v):
            raise TegradError(f"{what} must be a number, got {v!r}")
        values.append(Const(v, dtype))
    on, off = values
    shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]

    def fcompute(*index):
        d = index[axis]
        return select(indices[index[:axis] + index[axis + 1:]] == d, on, off)

    return compute(shape, fcompute, name="one_hot")
