"""``sin`` and ``cos`` of float32 values computed inline, without a library call, so that
loops containing them vectorise.

``|x|`` is reduced in double precision to ``r`` in ``[-pi/4, pi/4]`` and a quadrant
``q`` with ``|x| = (4k + q) pi/2 + r``, by two methods computed for every element and
one selected per element (no branch: the loop still vectorises):

- ``|x| <= 2**22``: Cody-Waite, ``n = round(|x| * 2/pi)``,
  ``r = ((|x| - n*P1) - n*P2) - n*P3`` with :data:`_PIO2` (``P1 + P2 + P3`` is pi/2 to
  136 bits). ``P1`` and ``P2`` have 30 bits and ``n < 2**23``, so ``n*P1`` and ``n*P2``
  are exact, and so is ``|x| - n*P1`` (Sterbenz): ``r`` keeps a relative error near
  2**-52 even for the float32 values closest to a multiple of pi/2 (``|r|`` down to 4e-9
  below 2**22).
- above (up to float32's largest, 3.4e38): Payne-Hanek in integer arithmetic, the
  method of ARM's optimized-routines ``sinf`` (glibc's since 2.28): the 24-bit
  mantissa, shifted by the exponent's low 3 bits, times the 96 bits of 2/pi that its
  exponent selects from :data:`_TWO_OVER_PI_HEX` is ``|x| * 2/pi`` modulo 4 as an exact
  2.62 fixed-point number; ``r`` is within 2**-33 relative.

``r`` is rounded to float32 and ``sin r``, ``cos r`` come from Cephes' float32
polynomials (:data:`_CEPHES_SINF`, :data:`_CEPHES_COSF`); the quadrant picks one and
its sign, and ``sin`` takes the sign of ``x``. ``sin(+-0) = +-0``, ``cos(+-0) = 1``,
NaN and ``+-inf`` give NaN, as numpy.

Measured against numpy's float64 ``sin`` and ``cos``, in units of the float32 spacing
of the exact value, on the 492,437 float32 values of
``tests/codegen/llvm/test_llvm_ops.py::test_inline_float32_sin_and_cos`` (uniform on
``[-10, 10]`` and ``[-1e4, 1e4]``, log-uniform magnitudes from 1e-40 to 3.4e38, the
float32 values nearest to the first 40,000 multiples of pi/2 and to one in each binade,
powers of two, their neighbours and negatives): at most 1.49 ulp for ``sin`` and 1.50
for ``cos`` (1.15 and 1.13 at the 99.9th percentile), on an x86-64 with FMA (LLVM fuses
the ``contract`` operations); 1.53 for either on a wider sample of 2.4 million. The test
asserts 2.

>>> sorted(SIN_COS_FLOAT32)
['cos', 'sin']
"""
from __future__ import annotations

from llvmlite import ir

from tegrad.codegen.llvm.polynomial import contract, horner

#: Cephes' float32 coefficients of ``(sin(r) - r) / r**3`` in ``r**2`` on ``|r| <= pi/4``,
#: highest degree first (sinf.c)
_CEPHES_SINF = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
#: Cephes' float32 coefficients of ``(cos(r) - 1 + r**2 / 2) / r**4`` in ``r**2`` on
#: ``|r| <= pi/4``, highest degree first (sinf.c)
_CEPHES_COSF = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)

#: pi/2 as three doubles: two of 30 bits (their products with an ``n < 2**23`` are
#: exact) and the rest rounded (together within 4e-35 of pi/2)
_PIO2 = (1.570796325802803, 9.920935791635221e-10, 5.170182981794105e-19)
_TWO_OVER_PI = 0.6366197723675814
#: the Cody-Waite reduction's range: ``n = round(|x| * 2/pi) < 2**23`` keeps it exact
CODY_WAITE_LIMIT = 4194304.0  # 2**22

#: the first 192 fractional bits of 2/pi (0.a2f9836e... in hexadecimal)
_TWO_OVER_PI_HEX = "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041"
#: word ``i`` holds the bits of 2/pi up to bit ``8 * (i + 1)``: the 32 bits ending there
#: (fewer for ``i < 3``); a float32 of biased exponent ``e`` reads the words
#: ``(e >> 3) % 16 + (0, 4, 8)``
_TWO_OVER_PI_WORDS = tuple(int(_TWO_OVER_PI_HEX[max(0, 2 * i - 6):2 * i + 2], 16)
                           for i in range(24))
_PI_2_POW_M63 = 3.4061215800865545e-19  # pi * 2**-63: the 2.62 fraction's unit, in radians
_TABLE = "tegrad.two_over_pi"


def _i32(v):
    return ir.Constant(ir.IntType(32), v)


def _i64(v):
    return ir.Constant(ir.IntType(64), v)


def _f64(v):
    return ir.Constant(ir.DoubleType(), v)


def _cody_waite(em, ax):
    """``(r, n)`` for ``|x| <= CODY_WAITE_LIMIT`` (``r`` double, ``n`` i32)."""
    bld = em.builder
    ad = bld.fpext(ax, ir.DoubleType())
    n = bld.call(em.intrinsic("llvm.roundeven", ad.type),
                 [bld.fmul(ad, _f64(_TWO_OVER_PI))])
    r = ad
    for part in _PIO2:
        r = contract(bld.fsub(r, contract(bld.fmul(n, _f64(part)))))
    return r, bld.fptosi(n, ir.IntType(32))


def _table(em):
    """The module's constant array of :data:`_TWO_OVER_PI_WORDS`."""
    table = em.module.globals.get(_TABLE)
    if table is None:
        ty = ir.ArrayType(ir.IntType(32), len(_TWO_OVER_PI_WORDS))
        table = ir.GlobalVariable(em.module, ty, name=_TABLE)
        table.initializer = ir.Constant(ty, [_i32(w) for w in _TWO_OVER_PI_WORDS])
        table.global_constant = True
        table.linkage = "private"
        table.unnamed_addr = True
    return table


def _payne_hanek(em, ax):
    """``(r, n)`` for any finite ``|x| >= 2`` (``r`` double, ``n`` i32; other values give
    unused numbers): ``m = mantissa << (e & 7)`` times the words ``w0, w1, w2`` of 2/pi
    at ``e >> 3`` is, modulo 4 in 2.62 fixed point, ``(m*w0 mod 2**32) << 32 +
    m*w1 + (m*w2 >> 32)``; ``n`` is its rounded integer part."""
    bld = em.builder
    i32, i64 = ir.IntType(32), ir.IntType(64)
    bits = bld.bitcast(ax, i32)
    index = bld.and_(bld.lshr(bits, _i32(26)), _i32(15))
    shift = bld.and_(bld.lshr(bits, _i32(23)), _i32(7))
    m = bld.shl(bld.or_(bld.and_(bits, _i32(0x7fffff)), _i32(0x800000)), shift)
    table = _table(em)

    def word(offset):
        at = bld.add(index, _i32(offset)) if offset else index
        return bld.load(bld.gep(table, [_i32(0), at], inbounds=True), typ=i32)

    m64 = bld.zext(m, i64)
    high = bld.shl(bld.zext(bld.mul(m, word(0)), i64), _i64(32))
    middle = bld.mul(m64, bld.zext(word(4), i64))
    low = bld.lshr(bld.mul(m64, bld.zext(word(8), i64)), _i64(32))
    fraction = bld.add(bld.or_(high, low), middle)
    n = bld.lshr(bld.add(fraction, _i64(1 << 61)), _i64(62))
    fraction = bld.sub(fraction, bld.shl(n, _i64(62)))
    # the signed 64-bit fraction in double, as a signed high and an unsigned low half
    # (vector i64 -> double has no instruction before AVX-512)
    f64 = ir.DoubleType()
    upper = bld.sitofp(bld.trunc(bld.ashr(fraction, _i64(32)), i32), f64)
    lower = bld.uitofp(bld.trunc(fraction, i32), f64)
    r = bld.fadd(bld.fmul(upper, _f64(_PI_2_POW_M63 * 2.0 ** 32)),
                 bld.fmul(lower, _f64(_PI_2_POW_M63)))
    return r, bld.trunc(n, i32)


def _sin_cos_float32(em, x, cosine):
    bld = em.builder
    ft, i32 = x.type, ir.IntType(32)

    def c(v):
        return ir.Constant(ft, v)

    ax = bld.call(em.intrinsic("llvm.fabs", ft), [x])
    # NaN counts as large: the Cody-Waite path then reads 0 (its n converts to an int)
    large = bld.fcmp_unordered("ugt", ax, c(CODY_WAITE_LIMIT))
    r_small, n_small = _cody_waite(em, bld.select(large, c(0.0), ax))
    r_large, n_large = _payne_hanek(em, ax)
    r = bld.fptrunc(bld.select(large, r_large, r_small), ft)
    n = bld.select(large, n_large, n_small)
    z = bld.fmul(r, r)
    sin_r = contract(bld.fadd(contract(bld.fmul(bld.fmul(horner(bld, z, _CEPHES_SINF), z), r)),
                              r))
    cos_r = contract(bld.fadd(contract(bld.fmul(bld.fmul(horner(bld, z, _CEPHES_COSF), z), z)),
                              contract(bld.fsub(c(1.0), contract(bld.fmul(z, c(0.5)))))))
    odd = bld.icmp_unsigned("!=", bld.and_(n, _i32(1)), _i32(0))
    if cosine:
        # cos(q pi/2 + r) = cos r, -sin r, -cos r, sin r
        magnitude = bld.select(odd, sin_r, cos_r)
        flip = bld.shl(bld.and_(bld.add(n, _i32(1)), _i32(2)), _i32(30))
    else:
        # sin(q pi/2 + r) = sin r, cos r, -sin r, -cos r; sin(-a) = -sin(a)
        magnitude = bld.select(odd, cos_r, sin_r)
        flip = bld.xor(bld.shl(bld.and_(n, _i32(2)), _i32(30)),
                       bld.and_(bld.bitcast(x, i32), _i32(-0x80000000)))
    y = bld.bitcast(bld.xor(bld.bitcast(magnitude, i32), flip), ft)
    # x - x: NaN for +-inf and NaN
    return bld.select(bld.fcmp_unordered("uge", ax, c(float("inf"))), bld.fsub(x, x), y)


def sin_float32(em, x):
    """``sin`` of a float32 value inline (see the module's docstring)."""
    return _sin_cos_float32(em, x, cosine=False)


def cos_float32(em, x):
    """``cos`` of a float32 value inline (see the module's docstring)."""
    return _sin_cos_float32(em, x, cosine=True)


#: the inline lowerings by intrinsic name
SIN_COS_FLOAT32 = {"sin": sin_float32, "cos": cos_float32}
