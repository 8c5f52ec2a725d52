"""Dtype conversions with the evaluator's semantics (numpy ``astype`` on this host).

``convert(em, value, dtype)`` is what ``tg.cast`` does and what a store into a buffer of
another dtype does. Cases where LLVM's instructions differ from numpy:

- float -> int: the evaluator maps NaN and +-inf to 0, then numpy truncates toward zero
  with x86 ``cvttsd2si`` semantics: a value outside the 32-bit (int8 ... int32, uint8,
  uint16) or 64-bit (int64) range gives the smallest integer, then the result is
  truncated to the target width; uint32/uint64 convert ``x - 2**(n-1)`` and flip the top
  bit for ``x >= 2**(n-1)``. LLVM's ``fptosi`` gives poison out of range, so it only ever
  sees in-range operands here.
- x -> bool is ``x != 0`` (NaN is true); bool -> x is 0 or 1.

>>> from tegrad.codegen.llvm.conversions import CONVERSION_KINDS
>>> sorted(CONVERSION_KINDS)[:3]
['bool->bool', 'bool->float', 'bool->int']
"""
from __future__ import annotations

from llvmlite import ir

from tegrad.ir import dtypes as _dt

from tegrad.codegen.llvm.types import Value, bits, constant, is_signed, register_type


def _kind(dtype):
    if _dt.is_float(dtype):
        return "float"
    return "bool" if dtype == "bool" else "int"


def _same(em, v, dtype):
    return v.ir


def _to_bool_from_int(em, v, dtype):
    return em.builder.icmp_unsigned("!=", v.ir, ir.Constant(v.ir.type, 0))


def _to_bool_from_float(em, v, dtype):
    return em.builder.fcmp_unordered("!=", v.ir, ir.Constant(v.ir.type, 0.0))


def _from_bool_to_int(em, v, dtype):
    return em.builder.zext(v.ir, register_type(dtype)) if bits(dtype) > 1 else v.ir


def _from_bool_to_float(em, v, dtype):
    return em.builder.uitofp(v.ir, register_type(dtype))


def _int_to_int(em, v, dtype):
    src, dst = bits(v.dtype), bits(dtype)
    if dst < src:
        return em.builder.trunc(v.ir, register_type(dtype))
    if dst > src:
        ext = em.builder.sext if is_signed(v.dtype) else em.builder.zext
        return ext(v.ir, register_type(dtype))
    return v.ir


def _int_to_float(em, v, dtype):
    conv = em.builder.sitofp if is_signed(v.dtype) else em.builder.uitofp
    return conv(v.ir, register_type(dtype))


def fptrunc(bld, x, ty):
    """``x`` (a float or a vector of floats) rounded to the narrower float type ``ty``, to
    nearest, ties to even. A double becomes a half through a float rounded to odd:
    truncated toward zero, its last bit set when inexact (float has 13 more bits than
    half, and half's range and subnormals lie within float's normal range, so rounding
    that float to half rounds the double once); LLVM's own double-to-half truncation
    calls ``__truncdfhf2``, which neither x86-64's instructions nor the JIT provide."""
    src = x.type.element if isinstance(x.type, ir.VectorType) else x.type
    dst = ty.element if isinstance(ty, ir.VectorType) else ty
    if not (isinstance(src, ir.DoubleType) and isinstance(dst, ir.HalfType)):
        return bld.fptrunc(x, ty)

    def like(t, value):  # (t, and the constant value of that type or its vector)
        if isinstance(x.type, ir.VectorType):
            return ir.VectorType(t, x.type.count), [value] * x.type.count
        return t, value

    (f32, _), (i32, one), (_, zero) = like(ir.FloatType(), 0), like(ir.IntType(32), 1), \
        like(x.type, 0.0)
    near = bld.fptrunc(x, f32)
    back = bld.fpext(near, x.type)
    word = bld.bitcast(near, i32)
    one, zero = ir.Constant(i32, one), ir.Constant(x.type, zero)
    # rounded away from zero (beyond x, on x's side of 0): one step down in magnitude is
    # the truncation (never 0 here)
    away = bld.select(bld.fcmp_ordered(">", x, zero), bld.fcmp_ordered(">", back, x),
                      bld.fcmp_ordered("<", back, x))
    word = bld.select(away, bld.sub(word, one), word)
    # inexact (or NaN, which stays NaN): the sticky last bit
    word = bld.select(bld.fcmp_unordered("!=", back, x), bld.or_(word, one), word)
    return bld.fptrunc(bld.bitcast(word, f32), ty)


def _float_to_float(em, v, dtype):
    src, dst = bits(v.dtype), bits(dtype)
    if dst < src:
        return fptrunc(em.builder, v.ir, register_type(dtype))
    if dst > src:
        return em.builder.fpext(v.ir, register_type(dtype))
    return v.ir


def _truncate_toward_zero(em, x, n):
    """x86 ``cvtt`` of the double ``x`` to an n-bit integer: the smallest n-bit integer
    when the truncated value does not fit."""
    b = em.builder
    t = ir.IntType(n)
    fits = b.and_(b.fcmp_ordered(">", x, ir.Constant(x.type, -2.0 ** (n - 1) - 1.0)),
                  b.fcmp_ordered("<", x, ir.Constant(x.type, 2.0 ** (n - 1))))
    safe = b.select(fits, x, ir.Constant(x.type, 0.0))
    return b.select(fits, b.fptosi(safe, t), ir.Constant(t, -(1 << (n - 1))))


def _float_to_int(em, v, dtype):
    b = em.builder
    x = v.ir if v.dtype == "float64" else b.fpext(v.ir, register_type("float64"))
    fabs = em.intrinsic("llvm.fabs", x.type)
    finite = b.fcmp_ordered("!=", b.call(fabs, [x]), ir.Constant(x.type, float("inf")))
    x = b.select(finite, x, ir.Constant(x.type, 0.0))
    n = bits(dtype)
    if dtype in ("uint32", "uint64"):
        half = ir.Constant(x.type, 2.0 ** (n - 1))
        low = _truncate_toward_zero(em, x, n)
        high = b.xor(_truncate_toward_zero(em, b.fsub(x, half), n),
                     ir.Constant(ir.IntType(n), -(1 << (n - 1))))
        return b.select(b.fcmp_ordered(">=", x, half), high, low)
    wide = _truncate_toward_zero(em, x, 64 if n == 64 else 32)
    return b.trunc(wide, register_type(dtype)) if n < 32 else wide


#: one lowering per (source kind, target kind); float16 goes through the same rules
CONVERSION_KINDS = {
    "bool->bool": _same,
    "bool->int": _from_bool_to_int,
    "bool->float": _from_bool_to_float,
    "int->bool": _to_bool_from_int,
    "int->int": _int_to_int,
    "int->float": _int_to_float,
    "float->bool": _to_bool_from_float,
    "float->int": _float_to_int,
    "float->float": _float_to_float,
}


def convert(em, v, dtype):
    """``v`` (a :class:`Value`) converted to ``dtype`` as numpy's ``astype`` does."""
    if v.dtype == dtype:
        return v
    if isinstance(v.ir, ir.Constant) and _dt.is_int(v.dtype) and _dt.is_int(dtype):
        # folded here so that a constant divisor stays visibly constant
        value = v.ir.constant
        if not is_signed(v.dtype):
            value &= (1 << bits(v.dtype)) - 1
        return Value(constant(value, dtype), dtype)
    rule = CONVERSION_KINDS[f"{_kind(v.dtype)}->{_kind(dtype)}"]
    return Value(rule(em, v, dtype), dtype)


__all__ = ["CONVERSION_KINDS", "convert"]
