"""Dropout with a seeded counter-based random mask, or with an explicit mask.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((4,), dtype="float64", name="x")
>>> m = tg.placeholder((4,), dtype="float64", name="m")
>>> tg.evaluate(dropout(x, 0.5, mask=m), {x: np.ones(4), m: np.array([1., 0., 1., 0.])}).tolist()
[2.0, 0.0, 2.0, 0.0]
>>> s = tg.placeholder((), dtype="int64", name="seed")
>>> y = dropout(x, 0.25, seed=s)
>>> [t.name for t in tg.placeholders([y])]
['x', 'seed']
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir.builders import cast, if_then_else
from tegrad.ir.errors import DTypeError, ShapeError, TegradError
from tegrad.ir.random import random_uniform
from tegrad.ir.tensor import Tensor, compute
from tegrad.nn._util import check_number, check_same_dtype, check_tensor, const
from tegrad.ops._common import ravel
from tegrad.ops.validation import is_integer

__all__ = ["dropout"]


def _integer_scalar(value, op, x, what):
    """``value`` checked as an int or a 0-d integer tensor (returned as given)."""
    if is_integer(value):
        return value
    if isinstance(value, Tensor) and value.shape == ():
        if not _dt.is_int(value.dtype):
            raise DTypeError(f"{op} of {x.name!r}: {what} {value.name!r} has dtype "
                             f"{value.dtype}; an integer dtype is needed")
        return value
    raise TegradError(f"{op} of {x.name!r}: {what} must be an int or a 0-d integer tensor "
                      f"(e.g. a placeholder fed each step), got {value!r}")


def _flat_position(shape, index):
    """The row-major flat position of ``index`` in ``shape``, in int64 (tensors of more
    than 2**31 elements draw distinct numbers)."""
    return ravel([cast(i, "int64") for i in index], shape)


def random_keep_mask(x, rate, seed, stream):
    """The stage ``dropout_mask`` of 0s and 1s of ``x``'s shape and dtype: element ``f``
    (flat, row-major) is kept (1) when ``tg.random_uniform(seed, stream, f) >= rate``
    (float32, so kept with probability ``1 - rate`` to within 2**-24)."""
    one, zero = const(1.0, x.dtype), const(0.0, x.dtype)
    threshold = const(rate, "float32")
    return compute(x.shape, lambda *i: if_then_else(
        random_uniform(seed, stream, _flat_position(x.shape, i)) >= threshold, one, zero),
        name="dropout_mask")


def dropout(x, rate=0.5, mask=None, *, seed=0, training=True, stream=0):
    """Inverted dropout, PyTorch's: ``out = x * keep / (1 - rate)`` elementwise, ``keep``
    0 or 1; the gradient is ``keep / (1 - rate)`` times the incoming one.

    Without ``mask``, ``keep`` is a stage ``dropout_mask`` computed (nothing to feed) by
    the counter-based generator ``tg.random_uniform`` (Philox-4x32-10) from ``seed``,
    ``stream`` and each element's flat position: the same arguments give the same mask,
    evaluated or compiled with any threads and schedule. ``seed`` is an int or a 0-d
    integer tensor, such as a placeholder a training loop feeds a new value each step
    (no recompiling). Dropout layers sharing a seed pass different ``stream`` s (ints or
    0-d tensors as well): their masks are then independent of each other at every step,
    which seeds offset per layer (``seed + 1``) would not be across steps.
    With ``mask`` (a float tensor of 0s and 1s of the shape of ``x``, or broadcastable
    to it along size-1 dimensions, e.g. ``(N, C, 1, 1)`` for channel dropout) ``keep`` is
    the mask. ``rate`` is in ``[0, 1)``. ``training=False``, or ``rate = 0`` without a
    mask, returns ``x`` itself.
    """
    op = "dropout"
    check_tensor(x, op, "x")
    rate = check_number(rate, op, "rate")
    if not 0.0 <= rate < 1.0:
        raise TegradError(f"{op} of {x.name!r}: rate must be in [0, 1), got {rate}")
    if not isinstance(training, bool):
        raise TegradError(f"{op} of {x.name!r}: training must be True or False, got "
                          f"{training!r}")
    seed = _integer_scalar(seed, op, x, "seed")
    stream = _integer_scalar(stream, op, x, "stream")
    if not training or (rate == 0.0 and mask is None):
        return x
    if mask is None:
        mask = random_keep_mask(x, rate, seed, stream)
    check_tensor(mask, op, "mask")
    check_same_dtype(op, x, mask, "mask")
    if mask.ndim != x.ndim or any(m not in (1, s) for m, s in zip(mask.shape, x.shape)):
        raise ShapeError(f"{op}: mask {mask.name!r} of shape {mask.shape} does not match x "
                         f"{x.name!r} of shape {x.shape} (sizes must be equal or 1)")
    scale = 1.0 / (1.0 - rate)

    def body(*i):
        j = tuple(0 if m == 1 and s != 1 else a for a, m, s in zip(i, mask.shape, x.shape))
        return x[i] * mask[j] * scale

    return compute(x.shape, body, name=op)
