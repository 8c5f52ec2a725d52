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
import numbers

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError, TegradError
from ..expr import Const, Var  # noqa: F401  (Var: used by the doctests)
from ..mapper import walk
from ..tensor import ComputeOp, Tensor


def operator(fn):
    """Decorator for public operators: errors name the operator (``"add: ..."``).

    It also checks the integer constants of the stage it returns (see
    :func:`check_constants`).
    """
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            out = fn(*args, **kwargs)
            for t in out if isinstance(out, list) else [out]:
                check_constants(t)
            return out
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


def check_constants(t):
    """Integer constants in the body of ``t``'s stage must fit their dtype.

    The core language accepts ``Const(2**40, "int32")`` and only fails in numpy at
    evaluation, so a number given to an operator (``add(x_int32, 2**40)``) is checked
    here, where the error can still name the operator.
    """
    if not isinstance(getattr(t, "op", None), ComputeOp):
        return
    for node in walk(t.op.body):
        if type(node) is Const and _dt.is_int(node.dtype):
            lo, hi = _dt.min_value(node.dtype), _dt.max_value(node.dtype)
            if not lo <= node.value <= hi:
                raise DTypeError(f"the integer {node.value} does not fit the dtype "
                                 f"{node.dtype} ({lo} to {hi}) of stage {t.name!r}")


def is_int(value):
    """True for a Python or numpy integer that is not a bool."""
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool)


def is_number(value):
    """True for a Python or numpy real number or bool (an operand, not a tensor)."""
    return isinstance(value, (numbers.Real, np.number, np.bool_))


def check_tensor(x, what="x"):
    """``x`` must be a Tensor; returns it."""
    if not isinstance(x, Tensor):
        raise TegradError(f"{what} must be a tegrad Tensor, got {type(x).__name__} {x!r}")
    return x


def check_int(value, what, minimum=None):
    """``value`` must be an integer (at least ``minimum``); returns it as an int."""
    if not is_int(value):
        raise TegradError(f"{what} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        kind = {0: "non-negative", 1: "positive"}.get(minimum, f"at least {minimum}")
        raise TegradError(f"{what} must be {kind}, got {value}")
    return value


def int_list(values, what):
    """An int or a sequence of ints as a list of ints."""
    if is_int(values):
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


def normalize_axis(axis, x, extra=0, what="axis"):
    """``axis`` of tensor ``x`` as a non-negative position.

    The valid range is ``[-ndim - extra, ndim + extra)``; ``extra=1`` is for operators
    that insert a new axis (``expand_dims``, ``one_hot``).
    """
    ndim = x.ndim + extra
    if not is_int(axis):
        raise TegradError(f"{what} must be an integer, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what} {axis} is out of range for tensor {x.name!r} of shape "
                         f"{x.shape} (valid: {-ndim} to {ndim - 1})")
    return int(axis) % ndim


def normalize_axes(axis, x, what="axis"):
    """``None`` (every axis), an int or a sequence of ints as a sorted tuple of positions."""
    if axis is None:
        return tuple(range(x.ndim))
    each = what if is_int(axis) else f"{what} entry"
    axes = [normalize_axis(a, x, what=each) for a in int_list(axis, what)]
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
