"""Compile a program for the tools: native code through :func:`tegrad.build`.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((3,), dtype="float64", name="x")
>>> y = tg.compute((3,), lambda i: x[i] * 2.0, name="y")
>>> f = compile_program([x], [y])
>>> f(np.arange(3.0))[0].tolist()
[0.0, 2.0, 4.0]
"""
from __future__ import annotations

import tegrad

NATIVE = "native (LLVM)"


def backend():
    """The name of the backend :func:`compile_program` compiles with."""
    return NATIVE


def compile_program(inputs, outputs, *, threads=None):
    """``tegrad.build(inputs, outputs, threads=threads)``: ``f(*arrays)`` computes
    ``outputs`` (tensors or a ``tg.differentiate`` result) from ``inputs`` (placeholders,
    in the order of the arrays); ``f(*arrays, out=[...])`` writes into preallocated
    arrays; ``f.loops`` is the lowered loop nest."""
    return tegrad.build(list(inputs), outputs, threads=threads)
