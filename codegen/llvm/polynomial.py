"""Fusable arithmetic of the inline approximations of :mod:`tegrad.codegen.llvm.intrinsics`
and :mod:`tegrad.codegen.llvm.trig`.

An approximation's own multiply-adds carry LLVM's ``contract`` flag: LLVM may fuse them
into FMAs (they are the approximation's operations, whose error was measured either
way, not the program's, whose rounding follows the evaluator).

>>> from llvmlite import ir
>>> fn = ir.Function(ir.Module(), ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "p")
>>> bld = ir.IRBuilder(fn.append_basic_block())
>>> str(horner(bld, fn.args[0], (2.0, 1.0))).startswith("%")
True
"""
from __future__ import annotations

from llvmlite import ir


def contract(instr):
    """Allow ``instr`` to fuse (an approximation's own operations, not the program's)."""
    instr.flags.append("contract")
    return instr


def horner(bld, x, coefficients):
    """``sum(c * x**k)`` for ``coefficients`` highest degree first (fusable)."""
    poly = ir.Constant(x.type, coefficients[0])
    for coefficient in coefficients[1:]:
        poly = contract(bld.fadd(contract(bld.fmul(poly, x)), ir.Constant(x.type, coefficient)))
    return poly
