"""Compile a program for the tools: native code through ``tegrad.build`` when this version
of tegrad has it, else a callable with the same calling convention around ``tg.evaluate``.

The tools call only :func:`compile_program`, so they run unchanged on either backend.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((3,), dtype="float64", name="x")
>>> y = tg.compute((3,), lambda i: x[i] * 2.0, name="y")
>>> f = compile_program([x], [y])
>>> f(np.arange(3.0))[0].tolist()
[0.0, 2.0, 4.0]
"""
from __future__ import annotations

import numpy as np

import tegrad

NATIVE = "native (LLVM)"
REFERENCE = "reference evaluator"


def backend():
    """The name of the backend :func:`compile_program` uses in this version of tegrad."""
    return NATIVE if hasattr(tegrad, "build") else REFERENCE


def compile_program(inputs, outputs, *, threads=None):
    """``f(*arrays)`` computing ``outputs`` (tensors or a ``tg.differentiate`` result)
    from ``inputs`` (placeholders, in the order of the arrays); ``f(*arrays, out=[...])``
    writes into preallocated arrays. ``f.loops`` is the lowered loop nest (None on the
    reference evaluator); ``threads`` is ignored there."""
    if hasattr(tegrad, "build"):
        return tegrad.build(list(inputs), outputs, threads=threads)
    return _Evaluated(inputs, outputs)


class _Evaluated:
    """The reference evaluator behind the calling convention of ``tegrad.build``."""

    loops = None

    def __init__(self, inputs, outputs):
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    def __call__(self, *arrays, out=None):
        if len(arrays) != len(self.inputs):
            raise tegrad.FeedError(f"the program takes {len(self.inputs)} array(s) "
                                   f"({', '.join(t.name for t in self.inputs)}), got "
                                   f"{len(arrays)}")
        results = tegrad.evaluate(self.outputs, dict(zip(self.inputs, arrays)))
        if out is None:
            return [np.asarray(r) for r in results]
        for buffer, result in zip(out, results):
            np.copyto(buffer, result)
        return list(out)
