"""Broadcasting binary operators (arithmetic, shifts, comparisons) and ``where``.

Each operator takes two tensors, or a tensor and a Python number on either side, and
broadcasts them with numpy's rules (see :mod:`tegrad.ops.broadcast`). A number takes the
dtype of the tensor it meets; two tensors must have the same dtype, except that integer
dtypes widen (``int32`` with ``int64`` gives ``int64``).

>>> import tegrad as tg
>>> x = tg.placeholder((2, 3), name="x")
>>> y = tg.placeholder((3,), name="y")
>>> print(tg.format(add(x, y)).splitlines()[-1])
add[ax0, ax1] = x[ax0, ax1] + y[ax1]
"""
from __future__ import annotations

import numpy as np

from tegrad.ir import builders as api
from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError, TegradError
from tegrad.ir.expr import Expr, binary, call, compare, select
from tegrad.ir.tensor import Tensor
from tegrad.ops._common import is_integer, operator
from tegrad.ops.broadcast import broadcast_compute

__all__ = ["add", "subtract", "multiply", "divide", "floor_divide", "mod", "power",
           "maximum", "minimum", "atan2", "right_shift", "left_shift", "equal", "not_equal",
           "greater", "greater_equal", "less", "less_equal", "where"]


def _tensor_dtypes(*values):
    return [(v.name, v.dtype) for v in values if isinstance(v, Tensor)]


def _make_binary(name, build, formula, note="", check=None):
    """A broadcasting operator ``name(lhs, rhs)`` whose element is ``build(a, b)``."""

    def op(lhs, rhs):
        if check is not None:
            check(lhs, rhs)
        return broadcast_compute(name, [("lhs", lhs), ("rhs", rhs)], build)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"``out = {formula}``, elementwise with numpy broadcasting.\n\n"
                  f"``lhs`` and ``rhs`` are tensors, or one of them a Python number (which "
                  f"takes the other's dtype). {note}")
    return operator(op)


def _no_integer_division(lhs, rhs):
    for name, dtype in _tensor_dtypes(lhs, rhs):
        if not _dt.is_float(dtype):
            raise DTypeError(f"true division needs float tensors, but tensor {name!r} has "
                             f"dtype {dtype}; use floor_divide for integers, or cast")


def _floats_only(lhs, rhs):
    for name, dtype in _tensor_dtypes(lhs, rhs):
        if not _dt.is_float(dtype):
            raise DTypeError(f"tensor {name!r} has dtype {dtype}; a float dtype is needed "
                             f"(cast it)")


def _integers_only(lhs, rhs):
    for name, dtype in _tensor_dtypes(lhs, rhs):
        if not _dt.is_int(dtype):
            raise DTypeError(f"shifts need integer tensors, but tensor {name!r} has dtype "
                             f"{dtype}")
    for value in (lhs, rhs):
        if not isinstance(value, Tensor) and not is_integer(value):
            raise DTypeError(f"shifts need integer operands, got {value!r}")


def _scale_by_power_of_two(a, shift, combine):
    """``combine(a, 2**shift)`` where ``shift`` is an int or an integer expression.

    A constant shift becomes constant factors, split so that each fits the dtype
    (``x >> 31`` on int32 is ``x // 2**30 // 2``); an expression shift is ``2**shift``
    computed with ``pow`` in the common integer dtype.
    """
    if isinstance(shift, Expr):
        dtype = shift.dtype if not isinstance(a, Expr) else _dt.unify_dtypes(
            a.dtype, shift.dtype, "shift")
        return combine(a, api.power(api.const(2, dtype), api.cast(shift, dtype)))
    dtype = a.dtype
    width = np.dtype(dtype).itemsize * 8
    largest = _dt.max_value(dtype).bit_length() - 1  # largest k with 2**k representable
    shift = int(shift)
    if not 0 <= shift < width:
        raise TegradError(f"the shift {shift} is out of range for {dtype} (0 to {width - 1})")
    out = a
    while shift > 0:
        step = min(shift, largest)
        out = combine(out, 2 ** step)
        shift -= step
    return out


def _right_shift(a, b):
    return _scale_by_power_of_two(a, b, lambda x, f: binary("floordiv", x, f))


def _left_shift(a, b):
    return _scale_by_power_of_two(a, b, lambda x, f: binary("mul", x, f))


_SAME = "The result has the operands' dtype."
_SHIFT = ("Integers only. A number shift must be in [0, bits); a tensor shift must keep "
          "2**rhs inside the dtype (at most 30 for int32), as 2**rhs is computed with pow.")

add = _make_binary("add", lambda a, b: binary("add", a, b), "lhs + rhs", _SAME)
subtract = _make_binary("subtract", lambda a, b: binary("sub", a, b), "lhs - rhs", _SAME)
multiply = _make_binary("multiply", lambda a, b: binary("mul", a, b), "lhs * rhs", _SAME)
divide = _make_binary("divide", lambda a, b: binary("div", a, b), "lhs / rhs",
                      "True division of float tensors; integer tensors are an error (use "
                      "floor_divide), since TVM's integer division truncates while numpy's "
                      "gives floats.", check=_no_integer_division)
floor_divide = _make_binary("floor_divide", lambda a, b: binary("floordiv", a, b),
                            "floor(lhs / rhs)",
                            "Rounds toward minus infinity like numpy's ``//``, for integers "
                            "and floats (-7 // 2 == -4).")
mod = _make_binary("mod", lambda a, b: binary("floormod", a, b),
                   "lhs - floor(lhs / rhs) * rhs",
                   "The floor modulo of numpy's ``%``: the result has the sign of rhs "
                   "(-7 % 2 == 1).")
power = _make_binary("power", api.power, "lhs ** rhs", "Integers or floats (``pow``).")
maximum = _make_binary("maximum", lambda a, b: binary("max", a, b), "max(lhs, rhs)", _SAME)
minimum = _make_binary("minimum", lambda a, b: binary("min", a, b), "min(lhs, rhs)", _SAME)
atan2 = _make_binary("atan2", lambda a, b: call("atan2", a, b), "arctan2(lhs, rhs)",
                     "The angle of the point ``(rhs, lhs)`` in ``[-pi, pi]`` (numpy's "
                     "``arctan2(y, x)`` with ``y = lhs``, ``x = rhs``), float tensors.",
                     check=_floats_only)
right_shift = _make_binary("right_shift", _right_shift, "lhs >> rhs == lhs // 2**rhs",
                           "Floor division, so negative values shift arithmetically as in "
                           "numpy. " + _SHIFT, check=_integers_only)
left_shift = _make_binary("left_shift", _left_shift, "lhs << rhs == lhs * 2**rhs",
                          "Wraps on overflow like numpy. " + _SHIFT, check=_integers_only)


def _comparison(name, op, symbol):
    return _make_binary(name, lambda a, b: compare(op, a, b), f"lhs {symbol} rhs",
                        "The result is bool; the operands need one dtype (integers widen).")


equal = _comparison("equal", "eq", "==")
not_equal = _comparison("not_equal", "ne", "!=")
greater = _comparison("greater", "gt", ">")
greater_equal = _comparison("greater_equal", "ge", ">=")
less = _comparison("less", "lt", "<")
less_equal = _comparison("less_equal", "le", "<=")


def _truth(c):
    if isinstance(c, Expr):
        return c if _dt.is_bool(c.dtype) else compare("ne", c, 0)
    return bool(c)


@operator
def where(cond, a, b):
    """``out = cond ? a : b``, elementwise with numpy broadcasting of all three.

    ``cond`` is a bool tensor, or a numeric tensor read as ``cond != 0`` (numpy's
    truth); ``a`` and ``b`` are tensors or numbers of one dtype. Only the chosen branch
    is evaluated at each point.
    """
    return broadcast_compute("where", [("cond", cond), ("a", a), ("b", b)],
                             lambda c, x, y: select(_truth(c), x, y))
