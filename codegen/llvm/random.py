"""The intrinsic ``philox`` (Philox-4x32-10, :mod:`tegrad.ir.philox`) in integer LLVM IR.

Every word is an ``i32`` and each round's two products are ``zext`` to ``i64`` and
multiplied: x86's ``pmuludq`` (32 x 32 -> 64 bits, four lanes per AVX2 instruction) is
that operation, so the loop vectoriser keeps loops drawing random numbers vector loops;
AVX2 has no 64 x 64-bit vector multiply, which a 64-bit mixer such as SplitMix64 would
need. The arithmetic wraps as the reference's uint64 arithmetic masked to 32 bits, so the
bits equal the evaluator's exactly. A constant key (a seed given as a Python int) makes
the key schedule constant; a key read from a buffer is the same for every iteration and
LLVM computes its schedule outside the loop.

>>> from llvmlite import ir
>>> fn = ir.Function(ir.Module(), ir.FunctionType(ir.IntType(64), [ir.IntType(64)] * 3), "p")
>>> class Em: builder = ir.IRBuilder(fn.append_basic_block())
>>> str(philox(Em, list(fn.args), "uint64").type)
'i64'
"""
from __future__ import annotations

from llvmlite import ir

from tegrad.ir.philox import M0, M1, ROUNDS, W0, W1

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def _halves(bld, v):
    """The low and high 32-bit words of the i64 ``v``."""
    return bld.trunc(v, _I32), bld.trunc(bld.lshr(v, ir.Constant(_I64, 32)), _I32)


def _mulhilo(bld, multiplier, word):
    """The high and low words of the 64-bit product of two 32-bit words."""
    p = bld.mul(bld.zext(word, _I64), ir.Constant(_I64, multiplier))
    return bld.trunc(bld.lshr(p, ir.Constant(_I64, 32)), _I32), bld.trunc(p, _I32)


def philox(em, args, dtype):
    """``philox(key, counter_high, counter_low)`` (all uint64): the first two output words
    of Philox-4x32-10 as one i64, ``x0 | x1 << 32`` (see :func:`tegrad.ir.philox.philox_bits`)."""
    bld = em.builder
    key, high, low = args
    k0, k1 = _halves(bld, key)
    c0, c1 = _halves(bld, low)
    c2, c3 = _halves(bld, high)
    for r in range(ROUNDS):
        if r:
            k0 = bld.add(k0, ir.Constant(_I32, W0))
            k1 = bld.add(k1, ir.Constant(_I32, W1))
        hi0, lo0 = _mulhilo(bld, M0, c0)
        hi1, lo1 = _mulhilo(bld, M1, c2)
        c0, c1, c2, c3 = (bld.xor(bld.xor(hi1, c1), k0), lo1,
                          bld.xor(bld.xor(hi0, c3), k1), lo0)
    return bld.or_(bld.zext(c0, _I64), bld.shl(bld.zext(c1, _I64), ir.Constant(_I64, 32)))


__all__ = ["philox"]
