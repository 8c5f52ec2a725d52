"""Helpers shared by the operator modules: argument checks, axes and index arithmetic.

Every public operator is wrapped with :func:`operator`, which prefixes the messages of
the errors raised while it is built with the operator's name. Checks in this module
therefore raise messages *without* the operator name: ``"axis 3 is out of range ..."``
becomes ``"sum: axis 3 is out of range ..."``.

>>> ravel_text = str(ravel((Var("i"), Var("j")), (4, 3)))
>>> ravel_text
'i * 3 + j'
>>> [str(e) for e in unravel(Var("f"), (4, 3))]
['f // 3', 'f % 3']
"""
from __future__ import annotations

import functools

import numpy as np

from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.expr import Var  # noqa: F401  (used by the doctests)
from tegrad.ir.tensor import Tensor
from tegrad.ops.validation import check_int, is_integer, is_number  # noqa: F401  (shared checks)
from tegrad.ops.validation import normalize_axis


def operator(fn):
    """Decorator for public operators: errors name the operator (``"add: ..."``)."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TegradError as err:
            message = str(err)
            if message.startswith(f"{name}:"):
                raise
            try:
                renamed = type(err)(f"{name}: {message}")
            except Exception:  # an error class with another constructor: keep it as is
                raise err from None
            raise renamed from err

    return wrapper


def check_tensor(x, what="x"):
    """``x`` must be a Tensor; returns it."""
    if not isinstance(x, Tensor):
        raise TegradError(f"{what} must be a tegrad Tensor, got {type(x).__name__} {x!r}")
    return x


def int_list(values, what):
    """An int or a sequence of ints as a list of ints."""
    if is_integer(values):
        return [int(values)]
    if not isinstance(values, (tuple, list)):
        raise TegradError(f"{what} must be an integer or a sequence of integers, got "
                          f"{values!r}")
    return [check_int(v, what) for v in values]


def check_shape(shape, what="shape", allow_infer=False):
    """A tuple of positive ints (one ``-1`` allowed with ``allow_infer``)."""
    dims = int_list(shape, what)
    for d in dims:
        if d <= 0 and not (allow_infer and d == -1):
            raise ShapeError(f"{what} {tuple(dims)} has the invalid extent {d}; extents "
                             f"must be positive" + (" (or -1 once)" if allow_infer else ""))
    return tuple(dims)


def tensor_axis(axis, x, *, extra=0, what="axis"):
    """``axis`` of tensor ``x`` as a non-negative position (the message names ``x``).

    The valid range is ``[-ndim - extra, ndim + extra)``; ``extra=1`` is for operators
    that insert a new axis (``expand_dims``, ``one_hot``).
    """
    return normalize_axis(axis, x.ndim + extra, what,
                          owner=f"tensor {x.name!r} of shape {x.shape}")


def normalize_axes(axis, x, what="axis"):
    """``None`` (every axis), an int or a sequence of ints as a sorted tuple of positions."""
    if axis is None:
        return tuple(range(x.ndim))
    each = what if is_integer(axis) else f"{what} entry"
    axes = [tensor_axis(a, x, what=each) for a in int_list(axis, what)]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{what} {axis!r} names an axis of tensor {x.name!r} twice")
    return tuple(sorted(axes))


def check_keepdims(keepdims):
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TegradError(f"keepdims must be True or False, got {keepdims!r}")
    return bool(keepdims)


def strides(shape):
    """Row-major strides of ``shape`` in elements."""
    out, step = [], 1
    for extent in reversed(shape):
        out.append(step)
        step *= extent
    return tuple(reversed(out))


def ravel(indices, shape):
    """The row-major flat index ``sum(indices[d] * strides[d])`` (0 for no indices)."""
    flat = None
    for index, stride, extent in zip(indices, strides(shape), shape):
        if extent == 1:
            continue
        term = index if stride == 1 else index * stride
        flat = term if flat is None else flat + term
    return 0 if flat is None else flat


def unravel(flat, shape):
    """Indices of the row-major flat index ``flat`` in ``shape``: ``flat // stride % extent``.

    The outermost index needs no ``%`` and the innermost no ``//``; extents of 1 give 0.
    """
    out = []
    for d, (stride, extent) in enumerate(zip(strides(shape), shape)):
        if extent == 1:
            out.append(0)
            continue
        index = flat if stride == 1 else flat // stride
        if any(e != 1 for e in shape[:d]):
            index = index % extent
        out.append(index)
    return tuple(out)


def numel(shape):
    """The number of elements of ``shape`` as a Python int."""
    out = 1
    for extent in shape:
        out *= extent
    return out
