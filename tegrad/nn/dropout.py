"""Dropout with an explicit mask or a deterministic, seeded hash mask.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((4,), dtype="float64", name="x")
>>> m = tg.placeholder((4,), dtype="float64", name="m")
>>> tg.evaluate(dropout(x, 0.5, mask=m), {x: np.ones(4), m: np.array([1., 0., 1., 0.])}).tolist()
[2.0, 0.0, 2.0, 0.0]
"""
from __future__ import annotations

from tegrad.ir.builders import cast, if_then_else
from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.tensor import compute
from tegrad.nn._util import check_number, check_same_dtype, check_tensor, const
from tegrad.ops.validation import is_integer

__all__ = ["dropout"]

#: the Mersenne prime 2^31 - 1: every hash state is below it, so products of two states
#: (or of a state and a multiplier) stay below 2^62 and int64 arithmetic never overflows
_MODULUS = 2147483647
#: multipliers of the three affine rounds of the hash
_MULTIPLIERS = (48271, 69621, 16807)
_MASK64 = (1 << 64) - 1


def _splitmix64(value):
    """SplitMix64 (Steele et al.) in Python integers: the seed's round constants."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def hash_keep_mask(shape, seed, rate, index):
    """The bool expression ``keep`` of the seeded mask at ``index`` (a tuple of axes).

    The flat (row-major) index ``f`` is hashed in int64 arithmetic modulo the prime
    ``M = 2^31 - 1``, with round constants ``b1, b2, b3`` derived from ``seed`` by
    SplitMix64 (at build time, in Python):
    ``h = f mod M; h = (a1*h + b1) mod M; h = (h*h + 1) mod M; h = (a2*h + b2) mod M;
    h = (h*h + 1) mod M; h = (a3*h + b3) mod M``. An element is kept when
    ``h >= floor(rate * M)``, i.e. with probability ``1 - rate`` up to hash quality
    (neighbouring elements and neighbouring seeds are uncorrelated in tests).
    """
    state = _splitmix64(seed & _MASK64)
    increments = []
    for _ in _MULTIPLIERS:
        state = _splitmix64(state)
        increments.append(state % _MODULUS)
    flat = cast(0, "int64")
    for d, i in enumerate(index):
        term = cast(i, "int64")
        flat = term if d == 0 else flat * shape[d] + term
    h = flat % _MODULUS
    for r, (mul, inc) in enumerate(zip(_MULTIPLIERS, increments)):
        h = (h * mul + inc) % _MODULUS
        if r < len(_MULTIPLIERS) - 1:
            h = (h * h + 1) % _MODULUS
    return h >= int(rate * _MODULUS)


def dropout(x, rate=0.5, mask=None, seed=0):
    """Inverted dropout: ``out = x * keep / (1 - rate)`` elementwise (PyTorch's scaling).

    With ``mask`` (a float tensor of 0s and 1s of the shape of ``x``, or broadcastable
    to it along size-1 dimensions, e.g. ``(N, C, 1, 1)`` for channel dropout) ``keep`` is
    the mask and ``out = x * mask / (1 - rate)``. Without it the mask is a stage
    ``dropout_mask`` of 0s and 1s computed (as an ordinary expression, nothing to feed)
    from ``seed`` and the flat index of each element by an integer hash (see
    :func:`hash_keep_mask`): the same ``(shape, seed, rate)`` gives the same mask.
    ``rate`` is in ``[0, 1]``; ``rate = 1`` drops everything (output zeros, as PyTorch).
    """
    op = "dropout"
    check_tensor(x, op, "x")
    rate = check_number(rate, op, "rate")
    if not 0.0 <= rate <= 1.0:
        raise TegradError(f"{op}: rate must be in [0, 1], got {rate}")
    if not is_integer(seed):
        raise TegradError(f"{op}: seed must be an integer, got {seed!r}")
    scale = 0.0 if rate == 1.0 else 1.0 / (1.0 - rate)
    if mask is None:
        seed = int(seed)
        one, zero = const(1.0, x.dtype), const(0.0, x.dtype)
        mask = compute(x.shape, lambda *i: if_then_else(
            hash_keep_mask(x.shape, seed, rate, i), one, zero), name="dropout_mask")
    check_tensor(mask, op, "mask")
    check_same_dtype(op, x, mask, "mask")
    if mask.ndim != x.ndim or any(m not in (1, s) for m, s in zip(mask.shape, x.shape)):
        raise ShapeError(f"{op}: mask {mask.name!r} of shape {mask.shape} does not match x "
                         f"{x.name!r} of shape {x.shape} (sizes must be equal or 1)")

    def body(*i):
        j = tuple(0 if m == 1 and s != 1 else a for a, m, s in zip(i, mask.shape, x.shape))
        return x[i] * mask[j] * scale

    return compute(x.shape, body, name=op)
