"""Binary operations and comparisons, one lowering per op (tegrad's BINARY_OPS and
COMPARE_OPS), with the evaluator's (numpy's) semantics:

- integers wrap on overflow; ``//`` and ``%`` round toward minus infinity (LLVM's
  ``sdiv``/``srem`` truncate); ``x // -1`` of the smallest integer wraps instead of
  trapping; a zero divisor stops the kernel with a ``division_by_zero`` status (the
  evaluator raises), and never reaches a ``div`` instruction (no SIGFPE);
- float ``//`` and ``%`` follow numpy's ``npy_divmod`` (floor of the quotient snapped to the
  nearest integer, remainder with the divisor's sign; a zero divisor gives ``a / b`` and
  ``fmod``'s NaN);
- float ``max``/``min`` are numpy's: a NaN first operand, else the first when strictly
  beyond the second, else the second (which may be NaN; ties such as -0.0 and 0.0 give
  the second);
- float comparisons are false with a NaN operand, except ``!=``.

Each lowering takes operands already converted to the result dtype and returns an LLVM
value.

>>> from tegrad.ir.expr import BINARY_OPS
>>> set(BINARY_LOWERINGS) == set(BINARY_OPS)
True
"""
from __future__ import annotations

from llvmlite import ir

from tegrad.ir import dtypes as _dt

from tegrad.codegen.llvm.types import is_signed


def _const(v, value):
    return ir.Constant(v.type, value)


def _add(em, a, b, dtype):
    return em.builder.fadd(a, b) if _dt.is_float(dtype) else em.builder.add(a, b)


def _sub(em, a, b, dtype):
    return em.builder.fsub(a, b) if _dt.is_float(dtype) else em.builder.sub(a, b)


def _mul(em, a, b, dtype):
    return em.builder.fmul(a, b) if _dt.is_float(dtype) else em.builder.mul(a, b)


def _div(em, a, b, dtype):
    return em.builder.fdiv(a, b)


def _extremum(pred):
    def lower(em, a, b, dtype):
        bld = em.builder
        if _dt.is_float(dtype):
            # numpy's maximum/minimum: a NaN ``a``, else ``a`` when strictly beyond ``b``,
            # else ``b`` (a NaN ``b``, and ``b`` on ties such as -0.0 against 0.0); the
            # inner select is one maxps/minps on x86. numpy's float16 loop keeps ``a`` on
            # ties (``a >= b ? a : b``)
            tie = "=" if dtype == "float16" else ""
            beyond = bld.select(bld.fcmp_ordered(pred + tie, a, b), a, b)
            return bld.select(bld.fcmp_unordered("uno", a, a), a, beyond)
        cmp = bld.icmp_signed if is_signed(dtype) else bld.icmp_unsigned
        return bld.select(cmp(pred, a, b), a, b)
    return lower


def int_divmod(em, a, b, dtype):
    """Floor quotient and remainder of two integers; a zero divisor reports an error."""
    bld = em.builder
    zero = bld.icmp_unsigned("==", b, _const(b, 0))
    em.check_nonzero_divisor(zero, b)
    if not is_signed(dtype):
        safe = bld.select(zero, _const(b, 1), b)
        q, r = bld.udiv(a, safe), bld.urem(a, safe)
        return bld.select(zero, _const(a, 0), q), bld.select(zero, _const(a, 0), r)
    minus_one = bld.icmp_signed("==", b, _const(b, -1))
    safe = bld.select(bld.or_(zero, minus_one), _const(b, 1), b)
    q, r = bld.sdiv(a, safe), bld.srem(a, safe)
    # truncation rounded toward zero: step down when the remainder's sign differs from b's
    adjust = bld.and_(bld.icmp_signed("!=", r, _const(r, 0)),
                      bld.icmp_signed("<", bld.xor(r, safe), _const(r, 0)))
    q = bld.sub(q, bld.zext(adjust, q.type))
    r = bld.add(r, bld.select(adjust, safe, _const(r, 0)))
    q = bld.select(minus_one, bld.sub(_const(a, 0), a), q)
    r = bld.select(minus_one, _const(a, 0), r)
    return bld.select(zero, _const(a, 0), q), bld.select(zero, _const(a, 0), r)


def float_divmod(em, a, b):
    """numpy's ``npy_divmod``: ``(floor_divide(a, b), remainder(a, b))``."""
    bld = em.builder
    t = a.type
    zero = ir.Constant(t, 0.0)
    copysign = em.intrinsic("llvm.copysign", t)
    floor = em.intrinsic("llvm.floor", t)
    mod = bld.frem(a, b)
    quotient = bld.fdiv(a, b)
    div = bld.fdiv(bld.fsub(a, mod), b)
    mod_nonzero = bld.fcmp_unordered("!=", mod, zero)
    signs_differ = bld.xor(bld.fcmp_ordered("<", b, zero), bld.fcmp_ordered("<", mod, zero))
    adjust = bld.and_(mod_nonzero, signs_differ)
    mod = bld.select(adjust, bld.fadd(mod, b),
                     bld.select(mod_nonzero, mod, bld.call(copysign, [zero, b])))
    div = bld.select(adjust, bld.fsub(div, ir.Constant(t, 1.0)), div)
    fl = bld.call(floor, [div])
    fl = bld.select(bld.fcmp_ordered(">", bld.fsub(div, fl), ir.Constant(t, 0.5)),
                    bld.fadd(fl, ir.Constant(t, 1.0)), fl)
    fl = bld.select(bld.fcmp_unordered("!=", div, zero), fl,
                    bld.call(copysign, [zero, quotient]))
    b_zero = bld.fcmp_ordered("==", b, zero)
    return bld.select(b_zero, quotient, fl), bld.select(b_zero, bld.frem(a, b), mod)


def _float_divmod_at_least_f32(em, a, b, dtype, which):
    if dtype != "float16":
        return float_divmod(em, a, b)[which]
    f32 = ir.FloatType()
    bld = em.builder
    out = float_divmod(em, bld.fpext(a, f32), bld.fpext(b, f32))[which]
    return bld.fptrunc(out, a.type)


def _floordiv(em, a, b, dtype):
    if _dt.is_float(dtype):
        return _float_divmod_at_least_f32(em, a, b, dtype, 0)
    return int_divmod(em, a, b, dtype)[0]


def _floormod(em, a, b, dtype):
    if _dt.is_float(dtype):
        return _float_divmod_at_least_f32(em, a, b, dtype, 1)
    return int_divmod(em, a, b, dtype)[1]


BINARY_LOWERINGS = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "div": _div,
    "floordiv": _floordiv,
    "floormod": _floormod,
    "max": _extremum(">"),
    "min": _extremum("<"),
}


def _comparison(symbol, float_ordered=True):
    def lower(em, a, b, dtype):
        bld = em.builder
        if _dt.is_float(dtype):
            cmp = bld.fcmp_ordered if float_ordered else bld.fcmp_unordered
            return cmp(symbol, a, b)
        cmp = bld.icmp_signed if is_signed(dtype) else bld.icmp_unsigned
        return cmp(symbol, a, b)
    return lower


COMPARE_LOWERINGS = {
    "lt": _comparison("<"),
    "le": _comparison("<="),
    "gt": _comparison(">"),
    "ge": _comparison(">="),
    "eq": _comparison("=="),
    "ne": _comparison("!=", float_ordered=False),
}

__all__ = ["BINARY_LOWERINGS", "COMPARE_LOWERINGS", "int_divmod", "float_divmod"]
