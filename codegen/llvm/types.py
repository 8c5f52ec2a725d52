"""LLVM types of tegrad dtypes, and the value a lowered expression produces.

Bools are ``i1`` in registers and one byte in memory (numpy's layout); every other dtype
has the same representation in both places.

>>> str(register_type("bool")), str(memory_type("bool")), str(register_type("uint8"))
('i1', 'i8', 'i8')
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir

from tegrad.ir import dtypes as _dt

_FLOAT_TYPES = {"float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType()}

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()


class Value(NamedTuple):
    """An LLVM register value and the tegrad dtype it holds."""

    ir: object
    dtype: str


def bits(dtype):
    """Width in bits of an integer or float dtype (1 for bool)."""
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize * 8


def is_signed(dtype):
    return _dt.is_int(dtype) and np.dtype(dtype).kind == "i"


def register_type(dtype):
    """The LLVM type of a value of ``dtype`` held in a register."""
    if _dt.is_float(dtype):
        return _FLOAT_TYPES[dtype]
    return ir.IntType(bits(dtype))


def memory_type(dtype):
    """The LLVM type of one element of a buffer of ``dtype``."""
    return I8 if dtype == "bool" else register_type(dtype)


def promote(a, b):
    """numpy's common dtype of two operands (the evaluator computes with numpy)."""
    if a == b:
        return a
    return np.promote_types(a, b).name


def constant(value, dtype):
    """An LLVM constant of ``dtype`` (integers in two's complement)."""
    t = register_type(dtype)
    if _dt.is_float(dtype):
        return ir.Constant(t, float(value))
    n = bits(dtype)
    v = int(value) & ((1 << n) - 1)
    if n > 1 and v >= 1 << (n - 1):
        v -= 1 << n
    return ir.Constant(t, v)
