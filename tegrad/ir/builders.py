"""The scalar functions of the public API: constants, casts, selects and intrinsics.

>>> import tegrad as tg
>>> x = tg.placeholder((3,), name="x")
>>> y = tg.compute((3,), lambda i: tg.if_then_else(x[i] > 0, tg.exp(x[i]), 0.0), name="y")
"""
from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Const, as_expr, binary, call, cast, logical_and, logical_or, select  # noqa: F401
from tegrad.ir.errors import TegradError

__all__ = ["const", "cast", "if_then_else", "all", "any", "floordiv", "floormod", "exp",
           "log", "sqrt", "tanh", "sigmoid", "power", "abs", "sign", "floor", "ceil", "round",
           "trunc", "sin", "cos", "erf", "tan", "asin", "acos", "atan", "atan2", "sinh",
           "cosh", "asinh", "acosh", "atanh", "log1p", "expm1", "max_value", "min_value",
           "call", "stop_gradient"]


def const(value, dtype=None):
    """A constant; ``dtype`` defaults to int32 for ints and float32 for floats.

    >>> const(2, "float64").value
    2.0
    """
    if dtype is None:
        return as_expr(value)
    return Const(value, _dt.canonical_dtype(dtype))


def if_then_else(cond, true_value, false_value):
    """``cond ? true_value : false_value``; only the chosen branch is evaluated."""
    return select(cond, true_value, false_value)


def all(*conds):
    """Logical and of the conditions (true for none): ``tg.all(i >= 0, i < n)``."""
    return _fold(conds, logical_and, True)


def any(*conds):
    """Logical or of the conditions (false for none)."""
    return _fold(conds, logical_or, False)


def _fold(conds, combine, empty):
    """``combine`` over the conditions (given as arguments or as one list)."""
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        return Const(empty, "bool")
    out = _as_cond(conds[0])
    for c in conds[1:]:
        out = combine(out, c)
    return out


def _as_cond(c):
    e = Const(bool(c), "bool") if isinstance(c, bool) else as_expr(c)
    if not _dt.is_bool(e.dtype):
        raise TegradError(f"expected a bool condition, got {e} of dtype {e.dtype}")
    return e


def floordiv(a, b):
    """Floor division, rounding toward minus infinity: ``floordiv(-7, 2) == -4``."""
    return binary("floordiv", a, b)


def floormod(a, b):
    """Floor modulo, with the sign of the divisor: ``floormod(-7, 2) == 1``."""
    return binary("floormod", a, b)


def _unary(name, doc):
    def fn(x):
        return call(name, x)
    fn.__name__ = name
    fn.__doc__ = doc
    return fn


exp = _unary("exp", "``e**x``.")
log = _unary("log", "Natural logarithm.")
sqrt = _unary("sqrt", "Square root.")
tanh = _unary("tanh", "Hyperbolic tangent.")
sigmoid = _unary("sigmoid", "``1 / (1 + exp(-x))``, computed without overflow.")
abs = _unary("abs", "Absolute value (integers and floats).")
sign = _unary("sign", "-1, 0 or 1 by the sign of x.")
floor = _unary("floor", "Largest integer value not above x (float result).")
ceil = _unary("ceil", "Smallest integer value not below x (float result).")
round = _unary("round", "Nearest integer value, ties to even (like numpy and PyTorch).")
trunc = _unary("trunc", "Integer value toward zero.")
sin = _unary("sin", "Sine.")
cos = _unary("cos", "Cosine.")
erf = _unary("erf", "The error function.")
tan = _unary("tan", "Tangent.")
asin = _unary("asin", "Inverse sine, in [-pi/2, pi/2] (NaN outside [-1, 1]).")
acos = _unary("acos", "Inverse cosine, in [0, pi] (NaN outside [-1, 1]).")
atan = _unary("atan", "Inverse tangent, in (-pi/2, pi/2).")
sinh = _unary("sinh", "Hyperbolic sine.")
cosh = _unary("cosh", "Hyperbolic cosine.")
asinh = _unary("asinh", "Inverse hyperbolic sine.")
acosh = _unary("acosh", "Inverse hyperbolic cosine (NaN below 1).")
atanh = _unary("atanh", "Inverse hyperbolic tangent (NaN outside [-1, 1]).")
log1p = _unary("log1p", "``log(1 + x)``, accurate for tiny ``x``.")
expm1 = _unary("expm1", "``exp(x) - 1``, accurate for tiny ``x``.")


def atan2(y, x):
    """The angle of the point ``(x, y)``, in [-pi, pi], with numpy's signs and zeros."""
    return call("atan2", y, x)


def stop_gradient(x):
    """``x`` itself, with derivative zero (like JAX's ``lax.stop_gradient``).

    For a term a function's value does not depend on: ``softmax`` subtracts the row
    maximum through it, so its gradient does not flow back through the maximum.
    """
    return call("stop_gradient", x)


def power(a, b):
    """``a ** b``."""
    return call("pow", a, b)


def max_value(dtype):
    """The largest finite value of ``dtype`` as a constant."""
    dtype = _dt.canonical_dtype(dtype)
    return Const(_dt.max_value(dtype), dtype)


def min_value(dtype):
    """The smallest finite value of ``dtype`` as a constant."""
    dtype = _dt.canonical_dtype(dtype)
    return Const(_dt.min_value(dtype), dtype)
