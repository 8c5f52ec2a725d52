"""The lowering of each loop-IR expression kind to LLVM IR (:data:`EXPR_LOWERINGS`), and
how each kind's value dtype follows from its operands' (:data:`DTYPE_RULES`,
:data:`DTYPE_OPERANDS`).

A lowering ``f(em, e)`` gets the kernel's emitter (:class:`.emitter.KernelEmitter`) and
returns ``e``'s :class:`~tegrad.codegen.llvm.types.Value`, or a generator that yields
``em.expr_step(sub, dtype)`` for each sub-expression's value and returns it (run on an
explicit stack by :func:`tegrad.ir.mapper.run`, so an expression of any depth emits
without recursion). Binary ops, comparisons and intrinsics have tables of their own
(:mod:`.arithmetic`, :mod:`.intrinsics`).

>>> from tegrad.ir.expr import Const
>>> EXPR_LOWERINGS[Const](None, Const(2.5, "float32")).ir
<ir.Constant type='float' value=2.5>
"""
from __future__ import annotations

from llvmlite import ir

from tegrad.ir import dtypes as _dt
from tegrad.ir import expr as _ex
from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.llvm.arithmetic import BINARY_LOWERINGS, COMPARE_LOWERINGS
from tegrad.codegen.llvm.intrinsics import INTRINSIC_LOWERINGS
from tegrad.codegen.llvm.types import I1, Value, constant, promote


def _const(em, e):
    return Value(constant(e.value, e.dtype), e.dtype)


def _var(em, e):
    return em._lookup(e)


def _load(em, e):
    return em.load(e.buffer, em.address(e.buffer, e.indices))


def _dtype_rules():
    """How a node's value dtype follows from its operands' (``DTYPE_OPERANDS``)."""
    def first(em, e, kids):
        return kids[0]

    def promoted(em, e, kids):
        dtype = kids[0]
        for k in kids[1:]:
            dtype = promote(dtype, k)
        return dtype

    def boolean(em, e, kids):
        return "bool"

    rules = {_ex.Var: lambda em, e, kids: em._lookup(e).dtype,
             _n.Load: lambda em, e, kids: e.buffer.dtype,
             _ex.Binary: promoted, _ex.Neg: first, _ex.Select: promoted, _ex.Call: promoted}
    rules.update(dict.fromkeys((_ex.Compare, _ex.And, _ex.Or, _ex.Not), boolean))
    return rules


DTYPE_RULES = _dtype_rules()

#: the operands whose dtypes a node's value dtype depends on (other nodes: none)
DTYPE_OPERANDS = {
    _ex.Binary: lambda e: (e.a, e.b), _ex.Neg: lambda e: (e.a,),
    _ex.Select: lambda e: (e.true_value, e.false_value), _ex.Call: lambda e: e.args,
}


def _ir(work):
    """The LLVM value of the work of a :class:`Value`."""
    return (yield work).ir


def _binary(em, e):
    dtype = em.value_dtype(e)
    a = yield em.expr_step(e.a, dtype)
    b = yield em.expr_step(e.b, dtype)
    return Value(BINARY_LOWERINGS[e.op](em, a.ir, b.ir, dtype), dtype)


def _neg(em, e):
    a = yield em.expr_step(e.a)
    if _dt.is_float(a.dtype):
        return Value(em.builder.fneg(a.ir), a.dtype)
    return Value(em.builder.sub(ir.Constant(a.ir.type, 0), a.ir), a.dtype)


def _compare(em, e):
    dtype = promote(em.value_dtype(e.a), em.value_dtype(e.b))
    a = yield em.expr_step(e.a, dtype)
    b = yield em.expr_step(e.b, dtype)
    return Value(COMPARE_LOWERINGS[e.op](em, a.ir, b.ir, dtype), "bool")


def _logical(op):
    def lower(em, e):
        a = (yield em.expr_step(e.a, "bool")).ir
        if not em.has_effects(e.b):
            b = (yield em.expr_step(e.b, "bool")).ir
            return Value(em.builder.and_(a, b) if op == "and" else em.builder.or_(a, b), "bool")
        # the evaluator evaluates b only where a does not decide the result
        short = ir.Constant(I1, 0 if op == "and" else 1)
        arms = (lambda: _ir(em.expr_step(e.b, "bool")), lambda: short)
        if op == "or":
            arms = arms[::-1]
        return Value((yield em.branch_value(a, arms, "bool")), "bool")
    return lower


def _not(em, e):
    return Value(em.builder.not_((yield em.expr_step(e.a, "bool")).ir), "bool")


def _select(em, e):
    dtype = em.value_dtype(e)
    cond = (yield em.expr_step(e.cond, "bool")).ir
    if em.has_effects(e.true_value) or em.has_effects(e.false_value):
        arms = (lambda: _ir(em.expr_step(e.true_value, dtype)),
                lambda: _ir(em.expr_step(e.false_value, dtype)))
        return Value((yield em.branch_value(cond, arms, dtype)), dtype)
    t = yield em.expr_step(e.true_value, dtype)
    f = yield em.expr_step(e.false_value, dtype)
    return Value(em.builder.select(cond, t.ir, f.ir), dtype)


def _cast(em, e):
    return (yield em.expr_step(e.a, e.dtype))


def _call(em, e):
    dtype = em.value_dtype(e)
    args = []
    for a in e.args:
        args.append((yield em.expr_step(a, dtype)).ir)
    return Value(INTRINSIC_LOWERINGS[e.name](em, args, dtype), dtype)


def _unlowered(em, e):
    raise _ex.TegradError(f"kernel {em.kernel.name!r}: {type(e).__name__} {e} must be "
                          f"lowered to loops before code generation")


EXPR_LOWERINGS = {
    _ex.Const: _const,
    _ex.Var: _var,
    _n.Load: _load,
    _ex.Binary: _binary,
    _ex.Neg: _neg,
    _ex.Compare: _compare,
    _ex.And: _logical("and"),
    _ex.Or: _logical("or"),
    _ex.Not: _not,
    _ex.Select: _select,
    _ex.Cast: _cast,
    _ex.Call: _call,
    _ex.Read: _unlowered,
    _ex.Reduce: _unlowered,
    _ex.TupleReduce: _unlowered,
}
