"""Argument checking and index helpers shared by the layers of :mod:`tegrad.nn`.

Every layer validates its arguments with these helpers so that error messages have one
shape: they name the operator, the argument (or tensor) at fault and the problem.

>>> pair(3, "conv2d", "stride")
(3, 3)
>>> where_of([]) is None
True
"""
from __future__ import annotations

import numbers

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.builders import all as _all
from tegrad.ir.errors import DTypeError, ShapeError, TegradError
from tegrad.ir.expr import Const
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.tensor import Tensor
from tegrad.ops.validation import check_int, is_integer


def check_tensor(x, op, what, ndim=None, float_only=True):
    """``x`` must be a Tensor (of ``ndim`` dimensions, with a float dtype)."""
    if not isinstance(x, Tensor):
        raise TegradError(f"{op}: {what} must be a tegrad Tensor, got {type(x).__name__}")
    if ndim is not None and x.ndim != ndim:
        raise ShapeError(f"{op}: {what} {x.name!r} must have {ndim} dimension(s), but its "
                         f"shape is {x.shape}")
    if float_only and not _dt.is_float(x.dtype):
        raise DTypeError(f"{op}: {what} {x.name!r} has dtype {x.dtype}; a float dtype is "
                         f"needed")
    return x


def check_same_dtype(op, x, other, what):
    """``other`` must have the dtype of ``x``."""
    if other.dtype != x.dtype:
        raise DTypeError(f"{op}: {what} {other.name!r} has dtype {other.dtype} but "
                         f"{x.name!r} has dtype {x.dtype}; convert one with a cast")


def check_number(value, op, what):
    """``value`` must be a real Python or numpy number; returns it as a float."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.number)):
        raise TegradError(f"{op}: {what} must be a number, got {value!r}")
    return float(value)


def pair(value, op, what, minimum=None):
    """An int or a pair of ints as a pair ``(height, width)`` of checked ints."""
    if is_integer(value):
        values = (value, value)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        values = tuple(value)
    else:
        raise TegradError(f"{op}: {what} must be an int or a pair of ints, got {value!r}")
    return tuple(check_int(v, f"{op}: {what}", minimum=minimum) for v in values)


def ints(value, op, what, count, minimum=None):
    """An int or a sequence of ``count`` ints as a tuple of ``count`` checked ints."""
    if is_integer(value):
        values = (value,) * count
    elif isinstance(value, (tuple, list)) and len(value) == count:
        values = tuple(value)
    else:
        kind = {1: "an int", 2: "an int or a pair of ints"}.get(count, f"an int or {count} ints")
        raise TegradError(f"{op}: {what} must be {kind}, got {value!r}")
    return tuple(check_int(v, f"{op}: {what}", minimum=minimum) for v in values)


def side_pads(value, op, count):
    """``padding`` of ``count`` spatial dimensions as ``((before, after), ...)`` pairs of
    non-negative ints: the one parser of every layer's ``padding``.

    An int pads every side alike; ``count`` ints pad both sides of each dimension alike;
    ``count`` ``(before, after)`` pairs give each side (``((top, bottom), (left, right))``
    in 2-D); in 1-D a bare pair is ``(left, right)``, so ``(d * (K - 1), 0)`` is causal.

    >>> side_pads(1, "conv1d", 1), side_pads((2, 0), "conv1d", 1)
    (((1, 1),), ((2, 0),))
    >>> side_pads((1, 2), "conv2d", 2), side_pads(((2, 0), (1, 1)), "conv2d", 2)
    (((1, 1), (2, 2)), ((2, 0), (1, 1)))
    """
    def sequence(v):
        return isinstance(v, (tuple, list))

    if is_integer(value):
        sides = ((value, value),) * count
    elif count == 1 and sequence(value) and len(value) == 2 and all(map(is_integer, value)):
        sides = (tuple(value),)
    elif sequence(value) and len(value) == count and all(map(is_integer, value)):
        sides = tuple((v, v) for v in value)
    elif (sequence(value) and len(value) == count
          and all(sequence(v) and len(v) == 2 and all(map(is_integer, v)) for v in value)):
        sides = tuple(tuple(v) for v in value)
    else:
        forms = ("an int or a (left, right) pair of ints" if count == 1 else
                 f"an int, {count} ints or {count} (before, after) pairs of ints")
        raise TegradError(f"{op}: padding must be {forms}, got {value!r}")
    return tuple(tuple(check_int(v, f"{op}: padding", minimum=0) for v in pads)
                 for pads in sides)


def const(value, dtype):
    """A constant of ``dtype``."""
    return Const(value, dtype)


def reduce_axes(extents, prefix):
    """One reduce axis ``prefix0, prefix1, ...`` over ``[0, extent)`` per extent."""
    return [reduce_axis((0, e), name=f"{prefix}{d}") for d, e in enumerate(extents)]


def channel_reader(param, channels, op, what, x):
    """A function ``c -> param[c]`` for a per-channel vector of shape (C,) or (1,).

    A vector of one element is broadcast to every channel.
    """
    check_tensor(param, op, what, ndim=1)
    check_same_dtype(op, x, param, what)
    if param.shape[0] == channels:
        return lambda c: param[c]
    if param.shape[0] == 1:
        return lambda c: param[0]
    raise ShapeError(f"{op}: {what} {param.name!r} has shape {param.shape}, but {x.name!r} has "
                     f"{channels} channel(s) along the axis; expected ({channels},) or (1,)")


def in_bounds(index, extent, lowest, highest):
    """Conditions keeping ``index`` in ``[0, extent)`` given that it ranges over
    ``[lowest, highest]``; only the sides that can be violated get a condition."""
    conds = []
    if lowest < 0:
        conds.append(index >= 0)
    if highest >= extent:
        conds.append(index < extent)
    return conds


def window_index(out, tap, stride, dilation, offset):
    """``out * stride + tap * dilation - offset`` without unit factors or zero terms."""
    e = out if stride == 1 else out * stride
    e = e + (tap if dilation == 1 else tap * dilation)
    return e - offset if offset else e


def check_window(op, x, size, kernel, dilation, pads, dim):
    """The dilated kernel must fit in the input padded by ``pads = (before, after)`` along
    ``dim``; returns its extent."""
    effective = dilation * (kernel - 1) + 1
    padded = size + pads[0] + pads[1]
    if effective > padded:
        raise ShapeError(f"{op}: the kernel of {x.name!r} along {dim} ({kernel}, dilated to "
                         f"{effective}) is larger than the padded input ({size} + {pads[0]} + "
                         f"{pads[1]} = {padded})")
    return effective


def sliding_output(size, kernel, stride, pads, dilation, ceil_mode=False):
    """Windows of a sliding kernel over an input padded by ``pads = (before, after)``
    (PyTorch's rule for ``ceil_mode``, its ``pooling_output_shape_pad_lr``).

    ``floor((size + before + after - d(k-1) - 1) / s) + 1``, rounding up instead with
    ``ceil_mode`` unless the last window would then start beyond the input and the
    ``before`` padding.

    >>> sliding_output(5, 2, 2, (0, 0), 1), sliding_output(5, 2, 2, (0, 0), 1, ceil_mode=True)
    (2, 3)
    """
    span = size + pads[0] + pads[1] - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pads[0]:
        out -= 1
    return out


def sliding_window(out, tap, out_size, kernel, stride, dilation, padding, extent):
    """The input index of output ``out`` and kernel tap ``tap`` of a sliding window,
    ``out * stride + tap * dilation - padding`` (``padding`` the ``before`` side), and the
    conditions keeping it inside an input of ``extent`` (only those that some output/tap
    pair can violate)."""
    index = window_index(out, tap, stride, dilation, padding)
    highest = (out_size - 1) * stride + (kernel - 1) * dilation - padding
    return index, in_bounds(index, extent, -padding, highest)


def where_of(conds):
    """The ``where=`` of a reduction under ``conds``: None (unmasked) for no conditions,
    else their logical and."""
    return _all(*conds) if conds else None
