"""Philox-4x32-10, the counter-based random number generator of Salmon et al., "Parallel
random numbers: as easy as 1, 2, 3" (SC 2011), in numpy: the reference of the intrinsic
``philox`` (:mod:`tegrad.ir.intrinsics`), whose compiled lowering
(:mod:`tegrad.codegen.llvm.random`) uses the constants defined here.

A 128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key ``(k0, k1)`` (32-bit words) go
through ten rounds; each multiplies two words by the constants ``M0``, ``M1`` into 64-bit
products and mixes their halves with the other words and the key, which is bumped by the
Weyl constants ``W0``, ``W1`` between rounds. The output is four 32-bit words, a bijection
of the counter for each key. Random123's known-answer vectors check it (the tests).

>>> hex(int(philox4x32((0, 0, 0, 0), (0, 0))[0]))
'0x6627e8d5'
"""
import numpy as np

#: the round multipliers and the key's Weyl increments (Random123's PHILOX_M4x32_0/1,
#: PHILOX_W32_0/1)
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10

_LOW = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


def philox4x32(counter, key, rounds=ROUNDS):
    """The four output words of Philox-4x32 for the counter's and the key's 32-bit words
    (integers or arrays, broadcast; each word is taken modulo 2**32), as uint64 arrays
    holding values below 2**32: numpy's uint64 arithmetic wraps as the compiled code's."""
    c0, c1, c2, c3 = (np.asarray(c).astype(np.uint64) & _LOW for c in counter)
    k0, k1 = (np.asarray(k).astype(np.uint64) & _LOW for k in key)
    m0, m1 = np.uint64(M0), np.uint64(M1)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + np.uint64(W0)) & _LOW, (k1 + np.uint64(W1)) & _LOW
        # both products are below 2**64: 32-bit words times 32-bit constants
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = ((p1 >> _32) ^ c1 ^ k0, p1 & _LOW, (p0 >> _32) ^ c3 ^ k1, p0 & _LOW)
    return c0, c1, c2, c3


def philox_bits(key, counter_high, counter_low):
    """The intrinsic ``philox(key, counter_high, counter_low)`` on uint64 values: the key's
    low and high words are ``k0, k1``, the counter's words from the lowest are
    ``counter_low``'s low and high words then ``counter_high``'s; the result is the first
    two output words as one 64-bit value, ``x0 + x1 * 2**32``.

    >>> int(philox_bits(np.uint64(0), np.uint64(0), np.uint64(0))) == 0xe169c58d6627e8d5
    True
    """
    key, high, low = (np.asarray(a, dtype=np.uint64) for a in (key, counter_high, counter_low))
    x0, x1, _, _ = philox4x32((low, low >> _32, high, high >> _32), (key, key >> _32))
    return x0 | (x1 << _32)


__all__ = ["M0", "M1", "W0", "W1", "ROUNDS", "philox4x32", "philox_bits"]
