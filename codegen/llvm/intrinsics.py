"""One LLVM lowering per tegrad intrinsic (:data:`tegrad.ir.intrinsics.INTRINSICS`).

Float intrinsics of float16 operands are computed in float32 and rounded, as numpy does.
``exp`` (and so ``sigmoid``), and ``log``, ``tanh``, ``sin`` and ``cos`` of float32,
are computed inline, without a library call, so that loops containing them vectorise
(``exp`` within 1 ulp of numpy's in float64, 2 in float32; ``log`` and ``tanh`` within
a few ulp; ``sin`` and ``cos`` within 2 ulp for every float32, :mod:`.trig`); so is a
float32 ``pow`` by a constant number of quarters (``x ** 2.5``, lrn's ``** 0.75``), from
square roots (within 2 ulp); ``pow`` by the constant 0.5 is ``sqrt``, as numpy's.
Semantics follow the evaluator's numpy implementations: ``round`` ties to even
(``llvm.roundeven``); ``sigmoid`` is ``1 / (1 + e)`` or ``e / (1 + e)`` with
``e = exp(-|x|)`` (no overflow); ``erf`` of float32 is computed inline (within 6 ulp),
of other dtypes it is the C library's double ``erf`` (what Python's ``math.erf`` calls)
rounded to the operand's dtype, and so are ``asinh``, ``acosh``,
``atanh``, ``log1p`` and ``expm1``; ``tan``, ``asin``, ``acos``, ``atan``, ``atan2``,
``sinh`` and ``cosh`` are LLVM's intrinsics (the C library's ``tanf``/``tan``, ... once
lowered); every one of them links with libm alone; ``sign`` keeps NaN; integer ``abs``
of the smallest integer wraps; integer ``pow`` is exact with wrapping (a negative exponent
gives the truncated quotient ``1 / a**-b``: 1 or -1 for a = +-1, else 0, and 0 for a = 0).
``philox`` is integer arithmetic, bit for bit the reference's (:mod:`.random`).

>>> from tegrad.ir.intrinsics import INTRINSICS
>>> set(INTRINSIC_LOWERINGS) == set(INTRINSICS)
True
"""
from __future__ import annotations

from llvmlite import ir

from tegrad.ir import dtypes as _dt

from tegrad.codegen.llvm.conversions import fptrunc
from tegrad.codegen.llvm.polynomial import contract, horner
from tegrad.codegen.llvm.random import philox
from tegrad.codegen.llvm.trig import SIN_COS_FLOAT32
from tegrad.codegen.llvm.types import is_signed


def _in_float32(lower):
    """Run a float lowering on float16 operands in float32 and round the result."""
    def wrapped(em, args, dtype):
        if dtype != "float16":
            return lower(em, args, dtype)
        bld = em.builder
        wide = [bld.fpext(a, ir.FloatType()) for a in args]
        return bld.fptrunc(lower(em, wide, "float32"), args[0].type)
    return wrapped


def _llvm_unary(name):
    @_in_float32
    def lower(em, args, dtype):
        (x,) = args
        return em.builder.call(em.intrinsic(f"llvm.{name}", x.type), [x])
    return lower


_LN2 = 0.6931471805599453
_LOG2E = 1.4426950408889634


def exp_in_double(em, x):
    """``exp`` of a float32 (or float16) value, computed in double without a library call
    (so loops containing it vectorise) and rounded once: ``exp(x) = 2**n * exp(r)``
    with ``n = round(x / ln 2)``, ``|r| <= ln 2 / 2``, ``exp(r)`` from its Taylor series
    to ``r**8`` (relative error below 3e-10, far under a float32 ulp of 6e-8). The
    polynomial's operations may be fused (``contract``): they are this approximation's
    own, not the program's."""
    bld = em.builder
    f64 = ir.DoubleType()
    xd = bld.fpext(x, f64)
    nan = bld.fcmp_unordered("uno", xd, xd)
    # beyond these exp rounds to 0 or overflows to inf in float32 (and 2**n stays normal)
    clamped = bld.select(bld.fcmp_ordered(">", xd, ir.Constant(f64, 89.0)), ir.Constant(f64, 89.0),
                         bld.select(bld.fcmp_ordered("<", xd, ir.Constant(f64, -104.0)),
                                    ir.Constant(f64, -104.0), xd))
    xs = bld.select(nan, ir.Constant(f64, 0.0), clamped)
    n = bld.call(em.intrinsic("llvm.roundeven", f64), [bld.fmul(xs, ir.Constant(f64, _LOG2E))])
    r = contract(bld.fsub(xs, contract(bld.fmul(n, ir.Constant(f64, _LN2)))))
    poly = _taylor_exp(bld, r, 8)
    i64 = ir.IntType(64)
    scale = bld.bitcast(bld.shl(bld.add(bld.fptosi(n, i64), ir.Constant(i64, 1023)),
                                ir.Constant(i64, 52)), f64)
    y = fptrunc(bld, bld.fmul(poly, scale), x.type)
    return bld.select(nan, x, y)


def _taylor_exp(bld, r, degree):
    """``sum(r**k / k!, k <= degree)`` by Horner's rule (fusable)."""
    factorial = 1.0
    for j in range(2, degree + 1):
        factorial *= j
    poly = ir.Constant(r.type, 1.0 / factorial)
    for k in range(degree - 1, -1, -1):
        coefficient = 1.0
        for j in range(2, k + 1):
            coefficient /= j
        poly = contract(bld.fadd(contract(bld.fmul(poly, r)), ir.Constant(r.type, coefficient)))
    return poly


def _exp_cody_waite(em, x, *, limits, ln2, polynomial):
    """``exp(x)`` in ``x``'s own float type: NaN kept, inf above ``limits[1]``, zero below
    ``limits[0]``; else ``2**n * polynomial(r)`` with ``n = round(x / ln 2)`` and
    ``r = x - n * ln2[0] - n * ln2[1]`` (``ln2[0] + ln2[1] == ln 2``, Cody and Waite),
    ``2**n`` applied as two powers of two so that a subnormal result rounds once."""
    bld = em.builder
    ft = x.type
    double = isinstance(ft, ir.DoubleType)
    it = ir.IntType(64 if double else 32)
    bias, mantissa = (1023, 52) if double else (127, 23)

    def c(v):
        return ir.Constant(ft, v)

    nan = bld.fcmp_unordered("uno", x, x)
    big = bld.fcmp_ordered(">", x, c(limits[1]))
    small = bld.fcmp_ordered("<", x, c(limits[0]))
    xs = bld.select(bld.or_(nan, bld.or_(big, small)), c(0.0), x)
    n = bld.call(em.intrinsic("llvm.roundeven", ft), [bld.fmul(xs, c(_LOG2E))])
    r = contract(bld.fsub(contract(bld.fsub(xs, contract(bld.fmul(n, c(ln2[0]))))),
                          contract(bld.fmul(n, c(ln2[1])))))
    poly = polynomial(r)
    ni = bld.fptosi(n, it)
    half = bld.ashr(ni, ir.Constant(it, 1))

    def power_of_two(k):
        return bld.bitcast(bld.shl(bld.add(k, ir.Constant(it, bias)), ir.Constant(it, mantissa)),
                           ft)

    y = bld.fmul(bld.fmul(poly, power_of_two(half)), power_of_two(bld.sub(ni, half)))
    y = bld.select(big, c(float("inf")), bld.select(small, c(0.0), y))
    return bld.select(nan, x, y)


_LN2_HIGH = 0.6931471803691238  # ln 2 with its last 32 bits cleared: n * _LN2_HIGH is exact
_LN2_LOW = 1.9082149292705877e-10


def exp_double(em, x):
    """``exp`` of a double without a library call (loops containing it vectorise):
    Cody-Waite reduction (:func:`_exp_cody_waite`), ``exp(r)`` from its Taylor series to
    ``r**13`` (truncation error below 5e-18). Within 2 ulp of the correctly rounded
    value; the polynomial may be fused."""
    return _exp_cody_waite(em, x, limits=(-745.1332191019412, 709.782712893384),
                           ln2=(_LN2_HIGH, _LN2_LOW),
                           polynomial=lambda r: _taylor_exp(em.builder, r, 13))


#: Cephes' coefficients of ``(exp(r) - 1 - r) / r**2`` in float32, highest first
_CEPHES_EXPF = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                1.6666665459e-1, 5.0000001201e-1)


def exp_float32(em, x):
    """``exp`` of a float32 value in float32 arithmetic (twice the vector lanes of
    :func:`exp_in_double`): Cody-Waite reduction (:func:`_exp_cody_waite`), Cephes'
    degree-7 polynomial for ``exp(r)``. Within a few ulp of numpy's float32 ``exp``."""
    bld = em.builder

    def polynomial(r):
        poly = horner(bld, r, _CEPHES_EXPF)
        poly = contract(bld.fadd(contract(bld.fmul(poly, contract(bld.fmul(r, r)))), r))
        return bld.fadd(poly, ir.Constant(r.type, 1.0))

    return _exp_cody_waite(em, x, limits=(-103.97208404541016, 88.72283935546875),
                           ln2=(0.693359375, -2.12194440e-4), polynomial=polynomial)


def _exp_value(em, x, dtype):
    if dtype == "float32":
        return exp_float32(em, x)
    if dtype == "float16":
        return exp_in_double(em, x)
    return exp_double(em, x)


def _exp(em, args, dtype):
    return _exp_value(em, args[0], dtype)


@_in_float32
def _sigmoid(em, args, dtype):
    (x,) = args
    bld = em.builder
    one = ir.Constant(x.type, 1.0)
    e = _exp_value(em, bld.fneg(bld.call(em.intrinsic("llvm.fabs", x.type), [x])), dtype)
    denominator = bld.fadd(one, e)
    nonnegative = bld.fcmp_ordered(">=", x, ir.Constant(x.type, 0.0))
    return bld.select(nonnegative, bld.fdiv(one, denominator), bld.fdiv(e, denominator))


#: Cephes' coefficients of ``(tanh(x) - x) / x**3`` in ``x**2`` on ``|x| < 0.625``, float32
_CEPHES_TANHF = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
                 -3.33332819422e-1)


def tanh_float32(em, x):
    """``tanh`` of a float32 value in float32 arithmetic, without a library call (loops
    containing it vectorise): ``x + x**3 * P(x**2)`` (Cephes) for ``|x| < 0.625``,
    ``copysign(1 - 2 / (exp(2|x|) + 1), x)`` above, ``+-1`` beyond ``|x| > 44``
    (where it rounds to 1). Both branches are computed and one selected; NaN gives NaN
    and a zero keeps its sign. Within a few ulp of numpy's ``tanh``."""
    bld = em.builder
    ft = x.type

    def c(v):
        return ir.Constant(ft, v)

    ax = bld.call(em.intrinsic("llvm.fabs", ft), [x])
    square = bld.fmul(x, x)
    small = contract(bld.fadd(contract(bld.fmul(bld.fmul(horner(bld, square, _CEPHES_TANHF),
                                                            square), x)), x))
    # |x| <= 44 here, so exp(2|x|) stays finite
    clamped = bld.select(bld.fcmp_ordered(">", ax, c(44.0)), c(44.0), ax)
    e = exp_float32(em, bld.fadd(clamped, clamped))
    large = bld.call(em.intrinsic("llvm.copysign", ft, 2),
                     [bld.fsub(c(1.0), bld.fdiv(c(2.0), bld.fadd(e, c(1.0)))), x])
    y = bld.select(bld.fcmp_ordered(">=", ax, c(0.625)), large, small)
    return bld.select(bld.fcmp_ordered("==", x, c(0.0)), x, y)


#: Cephes' coefficients of ``(log(1 + z) - z + z**2 / 2) / z**3`` on ``[sqrt(1/2) - 1,
#: sqrt(2) - 1]``, float32, highest first
_CEPHES_LOGF = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                3.3333331174e-1)


def log_float32(em, x):
    """``log`` of a float32 value in float32 arithmetic, without a library call (loops
    containing it vectorise): ``x = m * 2**e`` with ``m`` in ``[sqrt(1/2), sqrt(2))``
    (subnormals scaled by ``2**23`` first), ``log(m) = z - z**2 / 2 + z**3 * P(z)`` with
    ``z = m - 1`` (Cephes), ``e * ln 2`` added in two parts. ``log(0) = -inf``, a
    negative ``x`` gives NaN, ``log(inf) = inf`` and NaN stays NaN. Within a few ulp of
    numpy's ``log``."""
    bld = em.builder
    ft, it = x.type, ir.IntType(32)

    def c(v):
        return ir.Constant(ft, v)

    def i(v):
        return ir.Constant(it, v)

    subnormal = bld.fcmp_ordered("<", x, c(1.1754943508222875e-38))
    scaled = bld.select(subnormal, bld.fmul(x, c(8388608.0)), x)
    bits = bld.bitcast(scaled, it)
    exponent = bld.sub(bld.and_(bld.lshr(bits, i(23)), i(0xff)),
                       bld.select(subnormal, i(126 + 23), i(126)))
    # m in [0.5, 1): the mantissa under the exponent of 0.5
    m = bld.bitcast(bld.or_(bld.and_(bits, i(0x007fffff)), i(0x3f000000)), ft)
    low = bld.fcmp_ordered("<", m, c(0.7071067811865476))
    exponent = bld.sub(exponent, bld.zext(low, it))
    z = bld.fsub(bld.select(low, bld.fadd(m, m), m), c(1.0))
    fe = bld.sitofp(exponent, ft)
    square = bld.fmul(z, z)
    y = bld.fmul(bld.fmul(horner(bld, z, _CEPHES_LOGF), z), square)
    y = contract(bld.fadd(y, contract(bld.fmul(fe, c(-2.12194440e-4)))))
    y = contract(bld.fadd(y, contract(bld.fmul(square, c(-0.5)))))
    y = contract(bld.fadd(contract(bld.fadd(z, y)), contract(bld.fmul(fe, c(0.693359375)))))
    y = bld.select(bld.fcmp_ordered("==", x, c(float("inf"))), x, y)
    y = bld.select(bld.fcmp_ordered("==", x, c(0.0)), c(float("-inf")), y)
    # NaN for a negative x (and a NaN x stays itself)
    y = bld.select(bld.fcmp_ordered("<", x, c(0.0)), c(float("nan")), y)
    return bld.select(bld.fcmp_unordered("uno", x, x), x, y)


def _float32_inline(inline, library):
    """``inline(em, x)`` for float32, the lowering ``library`` for other dtypes (float16
    through float32 exactly as numpy rounds it)."""

    def lower(em, args, dtype):
        if dtype == "float32":
            return inline(em, args[0])
        return library(em, args, dtype)
    return lower


def _libm_double(name):
    """The C library's double ``name`` on the operand widened to double, the result
    rounded back to the operand's dtype (what numpy's float32 loops round to, or closer)."""
    def lower(em, args, dtype):
        (x,) = args
        bld = em.builder
        f64 = ir.DoubleType()
        wide = x if dtype == "float64" else bld.fpext(x, f64)
        y = bld.call(em.libm(name, f64, [f64]), [wide])
        return y if dtype == "float64" else fptrunc(bld, y, x.type)
    return lower


#: the rational approximation of ``erf`` on ``[-4, 4]`` that Eigen and XLA use for float32:
#: ``erf(x) = x * P(x**2) / Q(x**2)``, coefficients highest degree first. Measured
#: against the C library's double ``erf`` on 340,000 float32 values (200,001 spread
#: over ``[-5, 5]``, normal samples from 1e-30 to 30 wide, subnormals): at most 5.4 ulp
#: of the float32 result (near ``|x| = 3.9``, where erf is within 4e-8 of 1), 3.7 ulp at
#: the 99.9th percentile
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def erf_float32(em, x):
    """``erf`` of a float32 value in float32 arithmetic, without a library call (loops
    containing it, such as GELU's, vectorise): ``x`` clamped to ``[-4, 4]`` (beyond, erf
    rounds to +-1 in float32), then ``x * P(x**2) / Q(x**2)`` (:data:`_ERF_P`). The clamp
    compares, so NaN stays NaN; a zero keeps its sign."""
    bld = em.builder
    ft = x.type
    four, minus_four = ir.Constant(ft, 4.0), ir.Constant(ft, -4.0)
    x = bld.select(bld.fcmp_ordered(">", x, four), four,
                   bld.select(bld.fcmp_ordered("<", x, minus_four), minus_four, x))
    square = bld.fmul(x, x)
    # x times the ratio (about 2 / sqrt(pi) near 0), not the ratio of x * P: a subnormal x
    # is then rounded once, in the last product
    ratio = bld.fdiv(horner(bld, square, _ERF_P), horner(bld, square, _ERF_Q))
    return bld.fmul(x, ratio)


_erf = _float32_inline(erf_float32, _libm_double("erf"))


@_in_float32
def _atan2(em, args, dtype):
    y, x = args
    return em.builder.call(em.intrinsic("llvm.atan2", y.type, 2), [y, x])


def _int_pow(em, a, b, dtype):
    """Exponentiation by squaring, in a loop (wrapping multiplication)."""
    bld = em.builder
    t = a.type
    zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
    pre = bld.block
    head = em.new_block("ipow.head")
    body = em.new_block("ipow.body")
    done = em.new_block("ipow.done")
    negative = (bld.icmp_signed("<", b, zero) if is_signed(dtype)
                else ir.Constant(ir.IntType(1), 0))
    start_exponent = bld.select(negative, zero, b)
    bld.branch(head)
    bld.position_at_end(head)
    result = bld.phi(t)
    base = bld.phi(t)
    exponent = bld.phi(t)
    result.add_incoming(one, pre)
    base.add_incoming(a, pre)
    exponent.add_incoming(start_exponent, pre)
    bld.cbranch(bld.icmp_unsigned("!=", exponent, zero), body, done)
    bld.position_at_end(body)
    odd = bld.trunc(exponent, ir.IntType(1))
    result.add_incoming(bld.select(odd, bld.mul(result, base), result), body)
    base.add_incoming(bld.mul(base, base), body)
    exponent.add_incoming(bld.lshr(exponent, one), body)
    bld.branch(head)
    bld.position_at_end(done)
    if not is_signed(dtype):
        return result
    # a negative exponent: 1 / a**|b| truncated toward zero
    minus_one = ir.Constant(t, -1)
    a_is_one = bld.icmp_signed("==", a, one)
    a_is_minus_one = bld.icmp_signed("==", a, minus_one)
    odd_b = bld.trunc(b, ir.IntType(1))
    reciprocal = bld.select(a_is_one, one,
                            bld.select(a_is_minus_one, bld.select(odd_b, minus_one, one), zero))
    return bld.select(negative, reciprocal, result)


#: float32 powers by a constant ``k / 4`` computed from square roots and products instead
#: of a library call (so that their loops vectorise): the ``k`` whose roundings stay
#: within 2 ulp (measured: 1.75 and 2.25 reach 2.4) and where no product overflows before
#: the result does. Not ``0.5``: numpy computes ``x ** 0.5`` as ``sqrt`` (``-0 -> -0``,
#: ``-inf -> nan``), and so does :func:`_pow`
ROOT_POWER_QUARTERS = frozenset((-3, -2, -1, 1, 3, 5, 6, 10))


def _quarters(b):
    """``k`` when ``b`` is a constant ``k / 4`` of :data:`ROOT_POWER_QUARTERS`, else None."""
    if not isinstance(b, ir.Constant) or not isinstance(b.constant, float):
        return None
    k = b.constant * 4
    return int(k) if k == int(k) and int(k) in ROOT_POWER_QUARTERS else None


def _root_power(em, a, k):
    """``a ** (k / 4)`` from ``q = sqrt(sqrt(a))`` or ``sqrt(a)``: ``a**i * q``,
    ``a**i * sqrt(a)`` or ``a**i * (a / q)`` for ``k == 4i + 1, 2, 3`` (``a / q`` rather
    than ``a**(i + 1) / q``: no product overflows before the result), and ``1 / q``,
    ``1 / sqrt(a)``, ``q / a`` for ``k == -1, -2, -3``; numpy's special values: 0 and
    infinities of either sign to 0 or ``+inf``, NaN for a negative ``a`` (from ``sqrt``)."""
    bld = em.builder
    ty = a.type
    x = bld.fadd(a, ir.Constant(ty, 0.0))  # -0 + 0 == +0
    root = bld.call(em.intrinsic("llvm.sqrt", ty), [x])
    fourth = bld.call(em.intrinsic("llvm.sqrt", ty), [root])
    whole, rest = divmod(abs(k), 4)
    part = {1: fourth, 2: root, 3: bld.fdiv(x, fourth)}[rest]
    if k < 0:
        out = bld.fdiv(fourth, x) if rest == 3 else bld.fdiv(ir.Constant(ty, 1.0), part)
    else:
        out = part
        for _ in range(whole):
            out = bld.fmul(x, out)
    zero, inf = ir.Constant(ty, 0.0), ir.Constant(ty, float("inf"))
    magnitude = bld.call(em.intrinsic("llvm.fabs", ty), [x])
    out = bld.select(bld.fcmp_ordered("==", x, zero), zero if k > 0 else inf, out)
    return bld.select(bld.fcmp_ordered("==", magnitude, inf), inf if k > 0 else zero, out)


def _pow(em, args, dtype):
    a, b = args
    if dtype in ("float32", "float64") and isinstance(b, ir.Constant) and b.constant == 0.5:
        # numpy computes a power by the scalar 0.5 as sqrt (-0 -> -0, -inf -> nan)
        return em.builder.call(em.intrinsic("llvm.sqrt", a.type), [a])
    if _dt.is_float(dtype):
        def lower(em, xs, d):
            k = _quarters(xs[1]) if d == "float32" else None
            if k is not None:
                return _root_power(em, xs[0], k)
            return em.builder.call(em.intrinsic("llvm.pow", xs[0].type), xs)
        return _in_float32(lower)(em, args, dtype)
    return _int_pow(em, a, b, dtype)


def _abs(em, args, dtype):
    (x,) = args
    bld = em.builder
    if _dt.is_float(dtype):
        return bld.call(em.intrinsic("llvm.fabs", x.type), [x])
    if not is_signed(dtype):
        return x
    zero = ir.Constant(x.type, 0)
    return bld.select(bld.icmp_signed("<", x, zero), bld.sub(zero, x), x)


def _sign(em, args, dtype):
    (x,) = args
    bld = em.builder
    if _dt.is_float(dtype):
        zero = ir.Constant(x.type, 0.0)
        return bld.select(bld.fcmp_ordered(">", x, zero), ir.Constant(x.type, 1.0),
                          bld.select(bld.fcmp_ordered("<", x, zero),
                                     ir.Constant(x.type, -1.0), x))
    zero = ir.Constant(x.type, 0)
    if not is_signed(dtype):
        return bld.zext(bld.icmp_unsigned("!=", x, zero), x.type)
    positive = bld.zext(bld.icmp_signed(">", x, zero), x.type)
    negative = bld.zext(bld.icmp_signed("<", x, zero), x.type)
    return bld.sub(positive, negative)


def _identity(em, args, dtype):
    return args[0]


INTRINSIC_LOWERINGS = {
    "exp": _exp,
    "log": _float32_inline(log_float32, _llvm_unary("log")),
    "sqrt": _llvm_unary("sqrt"),
    "tanh": _float32_inline(tanh_float32, _llvm_unary("tanh")),
    "sin": _float32_inline(SIN_COS_FLOAT32["sin"], _llvm_unary("sin")),
    "cos": _float32_inline(SIN_COS_FLOAT32["cos"], _llvm_unary("cos")),
    "floor": _llvm_unary("floor"),
    "ceil": _llvm_unary("ceil"),
    "round": _llvm_unary("roundeven"),
    "trunc": _llvm_unary("trunc"),
    "sigmoid": _sigmoid,
    "erf": _erf,
    # LLVM's intrinsics where it has one (a vector library could vectorise them; without
    # one they become the C library's tan/tanf, ... per element), else the C library's
    # double function, as erf
    "tan": _llvm_unary("tan"),
    "asin": _llvm_unary("asin"),
    "acos": _llvm_unary("acos"),
    "atan": _llvm_unary("atan"),
    "atan2": _atan2,
    "sinh": _llvm_unary("sinh"),
    "cosh": _llvm_unary("cosh"),
    "asinh": _libm_double("asinh"),
    "acosh": _libm_double("acosh"),
    "atanh": _libm_double("atanh"),
    "log1p": _libm_double("log1p"),
    "expm1": _libm_double("expm1"),
    "pow": _pow,
    "abs": _abs,
    "sign": _sign,
    "stop_gradient": _identity,
    "philox": philox,
}

__all__ = ["INTRINSIC_LOWERINGS"]
