"""Elementwise unary operators, ``cast``, ``clip`` and the constant-filled tensors.

>>> import tegrad as tg
>>> x = tg.placeholder((2, 3), name="x")
>>> print(tg.format(exp(x)).splitlines()[-1])
exp[ax0, ax1] = exp(x[ax0, ax1])
"""
from __future__ import annotations

from tegrad.ir import builders as api
from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError, TegradError
from tegrad.ir.expr import Const, binary, call, cast as _cast_expr, neg
from tegrad.ir.tensor import Tensor, compute
from tegrad.ops._common import check_shape, check_tensor, is_number, operator

__all__ = ["log", "sqrt", "exp", "sigmoid", "tanh", "tan", "asin", "acos", "atan", "sinh",
           "cosh", "asinh", "acosh", "atanh", "log1p", "expm1", "negative", "floor", "ceil", "trunc",
           "round", "abs", "copy", "cast", "clip", "zeros", "zeros_like", "ones",
           "ones_like", "full", "full_like"]


def map_elements(x, fn, name):
    """The stage ``out[i...] = fn(x[i...])`` of ``x``'s shape."""
    return compute(x.shape, lambda *i: fn(x[i]), name=name)


def _make_unary(name, fn, formula, note):
    def op(x):
        check_tensor(x)
        return map_elements(x, fn, name)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"``out = {formula}``, elementwise; {note}."
    return operator(op)


def _integer_identity(fn):
    """``fn`` on floats; integers are already whole, so they pass unchanged (as in TVM)."""
    return lambda e: e if _dt.is_int(e.dtype) else fn(e)


_FLOATS = "float tensors only"
_WHOLE = "integer tensors pass unchanged (as in TVM; numpy would return floats)"

log = _make_unary("log", api.log, "log(x)", "the natural logarithm, " + _FLOATS)
sqrt = _make_unary("sqrt", api.sqrt, "sqrt(x)", _FLOATS)
exp = _make_unary("exp", api.exp, "exp(x)", _FLOATS)
sigmoid = _make_unary("sigmoid", api.sigmoid, "1 / (1 + exp(-x))",
                      "computed without overflow, " + _FLOATS)
tanh = _make_unary("tanh", api.tanh, "tanh(x)", _FLOATS)


def _intrinsic(name, formula, note=_FLOATS):
    """The operator ``name`` (PyTorch's name) applying the intrinsic of that name."""
    return _make_unary(name, lambda e: call(name, e), formula, note)


tan = _intrinsic("tan", "tan(x)")
asin = _intrinsic("asin", "arcsin(x)", "NaN outside [-1, 1] (numpy's ``arcsin``); " + _FLOATS)
acos = _intrinsic("acos", "arccos(x)", "NaN outside [-1, 1] (numpy's ``arccos``); " + _FLOATS)
atan = _intrinsic("atan", "arctan(x)", "in (-pi/2, pi/2); " + _FLOATS)
sinh = _intrinsic("sinh", "sinh(x)")
cosh = _intrinsic("cosh", "cosh(x)")
asinh = _intrinsic("asinh", "arcsinh(x)")
acosh = _intrinsic("acosh", "arccosh(x)", "NaN below 1; " + _FLOATS)
atanh = _intrinsic("atanh", "arctanh(x)", "+-inf at +-1 and NaN beyond; " + _FLOATS)
log1p = _intrinsic("log1p", "log(1 + x)", "exact for tiny x (no cancellation); " + _FLOATS)
expm1 = _intrinsic("expm1", "exp(x) - 1", "exact for tiny x (no cancellation); " + _FLOATS)
negative = _make_unary("negative", neg, "-x", "integers or floats, not bool")
floor = _make_unary("floor", _integer_identity(api.floor), "floor(x)",
                    "the largest whole value <= x, in x's dtype; " + _WHOLE)
ceil = _make_unary("ceil", _integer_identity(api.ceil), "ceil(x)",
                   "the smallest whole value >= x, in x's dtype; " + _WHOLE)
trunc = _make_unary("trunc", _integer_identity(api.trunc), "trunc(x)",
                    "rounding toward zero; " + _WHOLE)
round = _make_unary("round", _integer_identity(api.round), "round(x)",
                    "to the nearest whole value, ties to even like numpy; " + _WHOLE)
abs = _make_unary("abs", api.abs, "|x|", "integers or floats")
copy = _make_unary("copy", lambda e: e, "x", "a new stage holding the same elements")


@operator
def cast(x, dtype):
    """``out = dtype(x)``, elementwise conversion.

    Floats to integers truncate toward zero (like numpy's ``astype``); numbers to bool
    give ``x != 0``.
    """
    check_tensor(x)
    dtype = _dt.canonical_dtype(dtype)
    return map_elements(x, lambda e: _cast_expr(e, dtype), "cast")


def _check_bound(value, what):
    if value is not None and (isinstance(value, bool) or not is_number(value)):
        raise TegradError(f"{what} must be a number or None, got {value!r}")


@operator
def clip(x, a_min, a_max):
    """``out = min(max(x, a_min), a_max)``, elementwise.

    ``a_min`` and ``a_max`` are numbers in ``x``'s dtype with ``a_min <= a_max``; either
    may be None for no bound on that side (as in numpy; Relay requires both).
    """
    check_tensor(x)
    _check_bound(a_min, "a_min")
    _check_bound(a_max, "a_max")
    if a_min is None and a_max is None:
        raise TegradError("a_min and a_max are both None; give at least one bound")
    if a_min is not None and a_max is not None and a_min > a_max:
        raise TegradError(f"a_min {a_min!r} is greater than a_max {a_max!r}")

    def fn(e):
        if a_min is not None:
            e = binary("max", e, a_min)
        if a_max is not None:
            e = binary("min", e, a_max)
        return e

    return map_elements(x, fn, "clip")


def _fill_value(fill_value, dtype):
    """The constant (or scalar-tensor read) every element of a filled tensor takes."""
    if isinstance(fill_value, Tensor):
        if fill_value.shape != ():
            raise TegradError(f"fill_value tensor {fill_value.name!r} must be a scalar "
                              f"(shape ()), not of shape {fill_value.shape}")
        if fill_value.dtype != dtype:
            raise DTypeError(f"fill_value tensor {fill_value.name!r} has dtype "
                             f"{fill_value.dtype}, not {dtype}")
        return fill_value[()]
    if not is_number(fill_value):
        raise TegradError(f"fill_value must be a number or a scalar tensor, got "
                          f"{fill_value!r}")
    if _dt.is_int(dtype) and not float(fill_value).is_integer():
        raise DTypeError(f"fill_value {fill_value!r} is not a whole number, so it is not a "
                         f"valid {dtype} value")
    return Const(fill_value, dtype)


def _filled(shape, value, name):
    return compute(shape, lambda *i: value, name=name)


@operator
def full(shape, fill_value, dtype="float32"):
    """``out[i...] = fill_value`` of ``shape`` and ``dtype``.

    ``fill_value`` is a number (a whole one for integer dtypes) or a scalar tensor of
    ``dtype`` (as in Relay's ``full``).
    """
    shape = check_shape(shape)
    dtype = _dt.canonical_dtype(dtype)
    return _filled(shape, _fill_value(fill_value, dtype), "full")


@operator
def full_like(x, fill_value):
    """``full(x.shape, fill_value, x.dtype)``."""
    check_tensor(x)
    return _filled(x.shape, _fill_value(fill_value, x.dtype), "full_like")


@operator
def zeros(shape, dtype="float32"):
    """``out[i...] = 0`` of ``shape`` and ``dtype``."""
    shape = check_shape(shape)
    dtype = _dt.canonical_dtype(dtype)
    return _filled(shape, Const(0, dtype), "zeros")


@operator
def zeros_like(x):
    """``zeros(x.shape, x.dtype)``."""
    check_tensor(x)
    return _filled(x.shape, Const(0, x.dtype), "zeros_like")


@operator
def ones(shape, dtype="float32"):
    """``out[i...] = 1`` of ``shape`` and ``dtype``."""
    shape = check_shape(shape)
    dtype = _dt.canonical_dtype(dtype)
    return _filled(shape, Const(1, dtype), "ones")


@operator
def ones_like(x):
    """``ones(x.shape, x.dtype)``."""
    check_tensor(x)
    return _filled(x.shape, Const(1, x.dtype), "ones_like")
