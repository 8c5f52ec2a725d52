"""Stateless random numbers inside expressions: ``tg.random_uniform(seed, *counters)``.

A value is a pure function of its seed and counters (usually the element's indices), so
the same expression gives the same numbers in the evaluator and in compiled code, for any
thread count, loop order or tiling, and nothing is stored between calls. The function is
the intrinsic ``philox``: Philox-4x32-10 (:mod:`tegrad.ir.philox`), cuRAND's
``Philox4_32_10`` (behind PyTorch's CUDA dropout) and the generator of TensorFlow's
stateless random ops. It was chosen over a 64-bit integer mixer (SplitMix64's or
murmur3's finaliser) for two reasons:

- it is designed and tested as a keyed counter-based generator (its authors ran
  TestU01's BigCrush on it with many keys and counters in many patterns: consecutive,
  strided, one bit set, with no failure), so neighbouring elements, neighbouring seeds
  and nested loops of counters need no care; a mixer of a sum ``seed + counter`` gives
  two seeds overlapping, shifted streams;
- its multiplies are 32 x 32 -> 64 bits, one vector instruction (``pmuludq``) on x86,
  while AVX2 has no 64-bit vector multiply: a compiled loop of random numbers stays a
  vector loop.

>>> import numpy as np, tegrad as tg
>>> u = tg.compute((1000,), lambda i: tg.random_uniform(7, i), name="u")
>>> v = tg.evaluate(u, {})
>>> bool(0 <= v.min() and v.max() < 1 and abs(v.mean() - 0.5) < 0.05)
True
"""
from __future__ import annotations

import numbers

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError, TegradError
from tegrad.ir.expr import Const, Expr, IterVar, TensorLike, binary, call, cast

__all__ = ["random_bits", "random_uniform"]

#: significand bits of each float dtype: a uniform of that dtype takes that many random
#: bits, so every value ``k * 2**-bits`` of ``[0, 1)`` is equally likely and exact
_BITS = {"float16": 11, "float32": 24, "float64": 53}


def _word(value, what):
    """``value`` (an int, integer expression or 0-d integer tensor) as a uint64 expression
    (two's complement: -1 is 2**64 - 1, as numpy's and LLVM's conversions)."""
    if isinstance(value, TensorLike) and value.shape == ():
        value = value[()]
    if isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return Const(int(value) % 2**64, "uint64")
    if isinstance(value, (Expr, IterVar)):
        e = value.var if isinstance(value, IterVar) else value
        if _dt.is_int(e.dtype):
            return cast(e, "uint64")
        raise DTypeError(f"random numbers: the {what} {e} has dtype {e.dtype}; seeds and "
                         f"counters are integers")
    raise TegradError(f"random numbers: the {what} must be an integer, an integer expression "
                      f"or a 0-d integer tensor, got {value!r}")


def random_bits(seed, *counters):
    """64 random bits, a uint64 expression: the intrinsic ``philox`` of the key ``seed``
    and the 128-bit counter ``(counters[0], counters[1])``; one counter ``c`` is
    ``(0, c)``; with more than two, the first two and the seed make the key of the rest
    (one more Philox evaluation per further pair, so a flat index is cheaper than many).
    Seeds and counters are integers (ints, expressions, 0-d tensors), taken modulo 2**64.

    >>> import tegrad as tg
    >>> int(tg.evaluate(tg.compute((), lambda: random_bits(0, 0), name="b"), {}))
    16242730742183356629
    """
    if not counters:
        raise TegradError("random numbers need at least one counter (an index), got none")
    key = _word(seed, "seed")
    words = [_word(c, "counter") for c in counters]
    while len(words) > 2:
        key = call("philox", key, words[0], words[1])
        words = words[2:]
    high, low = words if len(words) == 2 else (Const(0, "uint64"), words[0])
    return call("philox", key, high, low)


def random_uniform(seed, *counters, dtype="float32"):
    """A random number in ``[0, 1)`` of ``dtype``, uniform on the multiples of
    ``2**-p`` (``p`` = 24 for float32, 53 for float64, 11 for float16): the top ``p``
    of :func:`random_bits`'s 64 bits, scaled. Deterministic: the same ``(seed,
    counters)`` always give the same number, evaluated or compiled. Its derivative is
    zero (nothing differentiable goes in).

    >>> import tegrad as tg
    >>> n = tg.compute((4,), lambda i: tg.random_uniform(1, i) < 0.5, name="coin")
    >>> tg.evaluate(n, {}).dtype.name
    'bool'
    """
    dtype = _dt.canonical_dtype(dtype)
    if dtype not in _BITS:
        raise DTypeError(f"random_uniform: dtype must be a float dtype ({', '.join(_BITS)}), "
                         f"got {dtype}")
    p = _BITS[dtype]
    top = binary("floordiv", random_bits(seed, *counters), Const(2 ** (64 - p), "uint64"))
    # below 2**p: exact as a signed integer and as a float of dtype; int32 -> float is one
    # vector instruction (cvtdq2ps), unlike uint64 -> float
    whole = cast(cast(top, "int32" if p < 32 else "int64"), dtype)
    return binary("mul", whole, Const(2.0 ** -p, dtype))
