"""The operators and methods of arrays on tensors: one table of calls into :mod:`tegrad.ops`.

``x + y``, ``2 * x``, ``x @ w``, ``-x``, ``abs(x)``, ``x < 0.5``, ``x.T``,
``x.sum(axis=1, keepdims=True)``, ``x.reshape(2, -1)``, ``x.astype("int32")`` build the
stages of the operators of the same names (``add``, ``multiply``, ``matmul``, ...), with
numpy's broadcasting rules; the other operand of a binary operator is a tensor or a
Python number (which takes the tensor's dtype). ``==`` and ``!=`` keep comparing tensors
by identity (tensors key feeds and adjoints): use ``ops.equal`` / ``ops.not_equal``.
``x[i, j]`` stays a read of one element, an expression for :func:`tegrad.compute`.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((2, 3), dtype="float64", name="x")
>>> y = (2 * x + 1).sum(axis=0)
>>> tg.evaluate(y, {x: np.ones((2, 3))}).tolist()
[6.0, 6.0, 6.0]
"""
from __future__ import annotations

import numbers

import numpy as np

from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.expr import Expr, IterVar
from tegrad.ir.tensor import ARRAY_METHODS, Tensor
from tegrad.ops import binary, elementwise, linalg, reduce, shape

__all__ = ["METHODS"]


def _operand(x, symbol, other):
    """``other`` if a tensor or a Python/numpy number can meet ``x`` under ``symbol``;
    otherwise an error naming the tensor and saying what to do instead."""
    if isinstance(other, Tensor):
        return other
    if isinstance(other, (numbers.Number, np.generic)) and not isinstance(other, complex):
        return other
    if isinstance(other, (Expr, IterVar)):
        why = ("an expression: build expressions from element reads (x[i]) inside "
               "tg.compute, or combine whole tensors")
    elif isinstance(other, np.ndarray):
        why = ("a numpy array: make it an input (tg.placeholder) or a constant tensor "
               "(ops.full)")
    else:
        why = f"{type(other).__name__} {other!r}: the other operand must be a tensor or a number"
    raise TegradError(f"tensor {x.name!r} {symbol} {why}")


def _binary(fn, symbol):
    """``x <symbol> other`` as ``fn(x, other)``."""
    def method(x, other):
        return fn(x, _operand(x, symbol, other))
    return method


def _reflected(fn, symbol):
    """``other <symbol> x`` (Python calls ``x.__r<op>__(other)``) as ``fn(other, x)``."""
    def method(x, other):
        return fn(_operand(x, symbol, other), x)
    return method


def _matmul(a, b):
    """numpy's ``a @ b``: a 1-D operand is a row (left) or a column (right) vector whose
    added dimension is removed from the result; other dimensions batch-broadcast."""
    for t in (a, b):
        if t.ndim == 0:
            raise ShapeError(f"tensor {t.name!r} @: a scalar tensor has no matrix product; "
                             f"use *")
    a2 = shape.expand_dims(a, 0) if a.ndim == 1 else a
    b2 = shape.expand_dims(b, -1) if b.ndim == 1 else b
    out = linalg.matmul(a2, b2)
    drop = ([out.ndim - 2] if a.ndim == 1 else []) + ([out.ndim - 1] if b.ndim == 1 else [])
    return shape.squeeze(out, tuple(drop)) if drop else out


def _dims(args):
    """``f(2, 3)`` or ``f((2, 3))``, as numpy's ``reshape`` and ``transpose`` take them."""
    if len(args) == 1 and (isinstance(args[0], (tuple, list)) or args[0] is None):
        return args[0]
    return tuple(args)


def _reshape(x, *shape_):
    return shape.reshape(x, _dims(shape_))


def _transpose(x, *axes):
    return shape.transpose(x, _dims(axes) if axes else None)


def _reduction(fn):
    def method(x, axis=None, keepdims=False):
        return fn(x, axis=axis, keepdims=keepdims)
    return method


#: tensor method name -> the function it calls, with the tensor first
METHODS = {
    "__add__": _binary(binary.add, "+"),
    "__radd__": _reflected(binary.add, "+"),
    "__sub__": _binary(binary.subtract, "-"),
    "__rsub__": _reflected(binary.subtract, "-"),
    "__mul__": _binary(binary.multiply, "*"),
    "__rmul__": _reflected(binary.multiply, "*"),
    "__truediv__": _binary(binary.divide, "/"),
    "__rtruediv__": _reflected(binary.divide, "/"),
    "__floordiv__": _binary(binary.floor_divide, "//"),
    "__rfloordiv__": _reflected(binary.floor_divide, "//"),
    "__mod__": _binary(binary.mod, "%"),
    "__rmod__": _reflected(binary.mod, "%"),
    "__pow__": _binary(binary.power, "**"),
    "__rpow__": _reflected(binary.power, "**"),
    "__matmul__": _binary(lambda a, b: _matmul(a, _tensor(a, b, "@")), "@"),
    "__rmatmul__": _reflected(lambda a, b: _matmul(_tensor(b, a, "@"), b), "@"),
    "__neg__": elementwise.negative,
    "__abs__": elementwise.abs,
    "__lt__": _binary(binary.less, "<"),
    "__le__": _binary(binary.less_equal, "<="),
    "__gt__": _binary(binary.greater, ">"),
    "__ge__": _binary(binary.greater_equal, ">="),
    "T": lambda x: shape.transpose(x),
    "sum": _reduction(reduce.sum),
    "mean": _reduction(reduce.mean),
    "max": _reduction(reduce.max),
    "min": _reduction(reduce.min),
    "reshape": _reshape,
    "transpose": _transpose,
    "astype": elementwise.cast,
}


def _tensor(x, other, symbol):
    """``other`` must be a tensor (a matrix product with a number is ``*``)."""
    if not isinstance(other, Tensor):
        raise TegradError(f"tensor {x.name!r} {symbol} {other!r}: a matrix product needs two "
                          f"tensors; use * to scale by a number")
    return other


ARRAY_METHODS.update(METHODS)
